// Hostile files through the front ends (docs/reliability.md): the crafted
// stores of hostile_file_test.cc, segments that lie with every checksum
// right, read by the `runstore` command-line tool and by the Python package.
// The engine bounds its own allocations by what a file's bytes can hold; the
// front ends must not undo that by sizing their own buffers from what a
// header claims (a series' record count, a record shape).
//
// Every read runs in a child process whose address space is limited
// (RLIMIT_AS) to its own size plus the store's bytes plus kMarginBytes, where
// an allocation sized by a lying header fails. Each command and each Python
// call must end normally: the CLI with exit code 0, 2 (Corruption) or 3 (not
// found), Python with a result, runstore.CorruptionError or KeyError; never
// out of memory, a signal or another error, and every case is Corruption
// somewhere (always for verify).
//
// The CLI's own size is the smallest address space in which it reads a small
// healthy store; the Python child measures its own VmSize after importing
// and warming up on a healthy store, then limits itself. The Python half
// runs when $RUNSTORE_PYTHON names a Python with the runstore package
// (scripts/test.sh sets it), and is skipped with a message otherwise.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "format/block.h"
#include "format/format.h"
#include "runstore/store.h"
#include "testing/crafted_segment.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

namespace fs = std::filesystem;
using ::runstore::testing::CraftedBlock;
using ::runstore::testing::FooterBlock;
using ::runstore::testing::ScalarBlock;
using ::runstore::testing::SegmentCrafter;
using ::runstore::testing::StringBlock;
using ::runstore::testing::TempDir;

// The address-space margin a child gets beyond its own size and the store.
constexpr uint64_t kMarginBytes = uint64_t{64} << 20;
// A child that runs longer than this is killed (and fails the test).
constexpr unsigned kChildSeconds = 120;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizers reserve terabytes of address space
#else
constexpr bool kSanitized = false;
#endif

// -- the crafted stores (those of hostile_file_test.cc) ---------------------

using Files = std::vector<std::pair<std::string, std::string>>;
struct Case {
  const char* name;
  std::function<Files()> files;
};

std::vector<RunId> Runs(int n) {
  std::vector<RunId> r;
  for (int i = 0; i < n; ++i) r.emplace_back(int64_t{i});
  return r;
}
std::vector<int64_t> Zeros(int n) { return std::vector<int64_t>(n, 0); }
std::vector<double> Values(int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(i * 0.5);
  return v;
}

Files OneBlock(CraftedBlock block, bool keep_lengths = false, bool sealed = true,
               const std::function<void(std::vector<format::CommitRecord>*,
                                        std::vector<FooterBlock>*)>& edit_footer = {}) {
  SegmentCrafter c;
  c.AddBlock(ScalarBlock("ok", Runs(10), Zeros(10), Values(10)));
  c.AddBlock(std::move(block), keep_lengths);
  c.AddCommit();
  if (sealed) c.Seal(edit_footer);
  return {{"c-00000001.rss", c.bytes()}};
}

CraftedBlock WithRawLen(CraftedBlock b, uint64_t raw_len) {
  b.header.raw_len = raw_len;
  return b;
}

CraftedBlock WithCount(CraftedBlock b, uint32_t count) {
  b.header.count = count;
  return b;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"footer entry whose payload wraps past 2^64", [] {
                     return OneBlock(ScalarBlock("x", Runs(4), Zeros(4), Values(4)), false, true,
                                     [](auto*, std::vector<FooterBlock>* blocks) {
                                       FooterBlock& b = blocks->back();
                                       const uint64_t payload_at = b.frame_offset + 128;
                                       b.header.payload_len = b.header.raw_len =
                                           UINT64_MAX - payload_at + 65;
                                     });
                   }});
  cases.push_back({"footer entry inside the segment header", [] {
                     return OneBlock(ScalarBlock("x", Runs(4), Zeros(4), Values(4)), false, true,
                                     [](auto*, std::vector<FooterBlock>* blocks) {
                                       blocks->back().frame_offset = 64;
                                     });
                   }});
  cases.push_back({"zstd block declaring 2^40 raw bytes", [] {
                     return OneBlock(WithRawLen(
                         ScalarBlock("x", Runs(100), Zeros(100), Values(100), Codec::kZstd),
                         uint64_t{1} << 40));
                   }});
  cases.push_back(
      {"zstd block whose frame declares another raw size", [] {
         return OneBlock(WithRawLen(
             ScalarBlock("x", Runs(1000), Zeros(1000), Values(1000), Codec::kZstd), 64 << 20));
       }});
  cases.push_back({"lz4 block declaring more than its sequences make", [] {
                     CraftedBlock b =
                         ScalarBlock("x", Runs(1000), Zeros(1000), Values(1000), Codec::kLz4);
                     const uint64_t raw = b.header.raw_len;
                     return OneBlock(WithRawLen(std::move(b), raw * 200));
                   }});
  cases.push_back({"block header claiming 2^32-1 records", [] {
                     return OneBlock(
                         WithCount(ScalarBlock("x", Runs(4), Zeros(4), Values(4)), 0xFFFFFFFF));
                   }});
  cases.push_back({"block header claiming more records than its columns hold", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     const auto n = static_cast<uint32_t>(b.payload.size() / 2);
                     return OneBlock(WithCount(std::move(b), n));
                   }});
  // Beyond hostile_file_test.cc: a zstd block whose header claims as many
  // records as its payload could expand to bytes (32768 per stored byte),
  // after a good block of the same series, so that a reader which sized its
  // output by the series' record count would have started.
  cases.push_back({"zstd block claiming 32768 records per stored byte", [] {
                     SegmentCrafter c;
                     c.AddBlock(ScalarBlock("x", Runs(10), Zeros(10), Values(10)));
                     std::vector<RunId> runs;
                     for (int i = 0; i < 100; ++i) runs.emplace_back(int64_t{1000 + i});
                     CraftedBlock b = ScalarBlock("x", runs, Zeros(100), Values(100), Codec::kZstd);
                     const uint64_t raw = uint64_t{32768} * b.payload.size();
                     b.header.raw_len = raw;
                     b.header.count = static_cast<uint32_t>(std::min<uint64_t>(raw, 0xFFFFFFFF));
                     c.AddBlock(std::move(b));
                     c.AddCommit();
                     c.Seal();
                     return Files{{"c-00000001.rss", c.bytes()}};
                   }});
  cases.push_back(
      {"record shape (0, 2^62)", [] {
         format::BlockBuilder builder(
             format::BlockSchema{"x", DType::kFloat64, false, {0, 3}, Codec::kNone});
         const int64_t shape[] = {0, 3};
         builder.Add(RunRef(int64_t{1}), 0, ValueRef{DType::kFloat64, shape, nullptr, 0});
         CraftedBlock b;
         std::vector<std::string_view> pieces;
         builder.Finish(&b.header, &pieces);
         for (auto p : pieces) b.payload.append(p);
         b.header.dims = {0, int64_t{1} << 62};
         return OneBlock(std::move(b));
       }});
  cases.push_back({"series name that is not UTF-8", [] {
                     CraftedBlock b = ScalarBlock("x", Runs(4), Zeros(4), Values(4));
                     b.header.name = std::string("n\xff", 2);
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"string run id that is not UTF-8", [] {
                     CraftedBlock b = StringBlock("s", RunId(std::string("r\xfe", 2)), 0, "v");
                     b.header.min_key = b.header.max_key = format::Key{RunId("r"), 0};
                     return OneBlock(std::move(b));
                   }});
  cases.push_back({"string value that is not UTF-8", [] {
                     return OneBlock(StringBlock("s", RunId("r"), 0, std::string("v\xc3", 2)));
                   }});
  cases.push_back({"unsealed segment with a block claiming 2^32-1 records", [] {
                     return OneBlock(
                         WithCount(ScalarBlock("x", Runs(4), Zeros(4), Values(4)), 0xFFFFFFFF),
                         false, /*sealed=*/false);
                   }});
  cases.push_back({"unsealed segment with a zstd block declaring 2^40 raw bytes", [] {
                     return OneBlock(WithRawLen(ScalarBlock("x", Runs(100), Zeros(100), Values(100),
                                                            Codec::kZstd),
                                                uint64_t{1} << 40),
                                     false, /*sealed=*/false);
                   }});
  return cases;
}

// -- child processes ---------------------------------------------------------

struct ChildResult {
  bool exited = false;
  int code = -1;    // exit code when exited
  int signal = 0;   // the signal that ended it otherwise
  std::string out;  // stdout and stderr
};

// Runs argv[0] with `argv`, its address space limited to `limit` bytes (0: no
// limit), stdout and stderr to `log`, and waits for it.
ChildResult RunChild(const std::vector<std::string>& argv, uint64_t limit, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(120);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (limit != 0) {
      const rlimit rl{limit, limit};
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(121);
    }
    alarm(kChildSeconds);  // survives exec: a hang ends in SIGALRM
    execv(args[0], args.data());
    _exit(122);
  }
  ChildResult r;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return r;
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  return r;
}

std::string Describe(const ChildResult& r) {
  std::string s = r.exited
                      ? "exit code " + std::to_string(r.code)
                      : "signal " + std::to_string(r.signal) + " (" + strsignal(r.signal) + ")";
  return s + "; output:\n" + r.out;
}

uint64_t StoreBytes(const std::string& path) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(path)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

// A small healthy store: the series and kinds of runs the crafted ones have.
void WriteHealthyStore(const std::string& path) {
  auto store = Store::Open(path, {});
  ASSERT_OK(store);
  auto w = (*store)->NewWriter({.writer_id = "h"});
  ASSERT_OK(w);
  for (int run = 0; run < 10; ++run) {
    ASSERT_OK((*w)->Append(run, "ok", 0, run * 0.5));
    ASSERT_OK((*w)->Append(run, "x", 0, run * 0.25));
  }
  ASSERT_OK((*w)->Append("r", "s", 0, ValueRef::String("v")));
  ASSERT_OK((*w)->Close());
}

// -- the CLI -----------------------------------------------------------------

#ifdef RUNSTORE_CLI_PATH
constexpr const char* kCli = RUNSTORE_CLI_PATH;
#else
constexpr const char* kCli = nullptr;
#endif

// The commands run on every store (after the program's path), with STORE and
// OUT standing for the store and a fresh output path.
std::vector<std::vector<std::string>> CliCommands() {
  std::vector<std::vector<std::string>> cmds;
  for (const bool skip : {false, true}) {
    for (std::vector<std::string> c : std::vector<std::vector<std::string>>{
             {"ls", "STORE", "--all"},
             {"ls", "STORE", "--runs", "--json"},
             {"info", "STORE"},
             {"info", "STORE", "--json"},
             {"cat", "STORE", "ok"},
             {"cat", "STORE", "x", "--format", "jsonl"},
             {"cat", "STORE", "s", "--format", "csv"},
             {"export", "csv", "STORE", "OUT", "--all"},
             {"verify", "STORE"},
         }) {
      if (skip) c.insert(c.begin(), "--skip-damaged");
      cmds.push_back(std::move(c));
    }
  }
  return cmds;
}

std::vector<std::string> CliArgv(std::vector<std::string> cmd, const std::string& store,
                                 const std::string& out) {
  for (std::string& a : cmd) {
    if (a == "STORE") a = store;
    if (a == "OUT") a = out;
  }
  cmd.insert(cmd.begin(), {kCli, "--no-progress"});
  return cmd;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

class HostileFrontendsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    healthy_ = dir_.path() + "/healthy";
    WriteHealthyStore(healthy_);
  }

  // The smallest address space (to 1 MiB) in which every command of
  // CliCommands() succeeds on the healthy store: the CLI's own size.
  uint64_t CliOwnSize() {
    uint64_t lo = 1 << 20, hi = uint64_t{16} << 30;
    auto all_ok = [&](uint64_t limit) {
      int n = 0;
      for (const auto& cmd : CliCommands()) {
        const std::string out = dir_.path() + "/probe" + std::to_string(n++);
        const ChildResult r = RunChild(CliArgv(cmd, healthy_, out), limit, dir_.path() + "/log");
        fs::remove_all(out);
        if (!r.exited || r.code != 0) return false;
      }
      return true;
    };
    if (!all_ok(hi)) {
      ADD_FAILURE() << "the CLI does not read the healthy store in " << hi << " bytes";
      return hi;
    }
    while (hi - lo > (1 << 20)) {
      const uint64_t mid = lo + (hi - lo) / 2;
      (all_ok(mid) ? hi : lo) = mid;
    }
    return hi;
  }

  TempDir dir_;
  std::string healthy_;
};

TEST_F(HostileFrontendsTest, CliNeverAllocatesMoreThanTheFileHolds) {
  if (kSanitized) GTEST_SKIP() << "address-space limits do not apply under a sanitizer";
  if (kCli == nullptr) GTEST_SKIP() << "the runstore CLI is not built (RUNSTORE_BUILD_CLI=OFF)";
  const uint64_t own = CliOwnSize();
  std::printf("the CLI reads a small store in %llu MiB of address space\n",
              static_cast<unsigned long long>(own >> 20));
  const std::vector<Case> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const std::string store = dir_.path() + "/case" + std::to_string(i);
    ASSERT_OK(testing::WriteCraftedStore(Env::Default(), store, cases[i].files()));
    const uint64_t limit = own + StoreBytes(store) + kMarginBytes;
    int corruption = 0, n = 0;
    for (const auto& cmd : CliCommands()) {
      const std::string out = dir_.path() + "/out" + std::to_string(i) + "_" + std::to_string(n++);
      const std::vector<std::string> argv = CliArgv(cmd, store, out);
      const ChildResult r = RunChild(argv, limit, dir_.path() + "/log");
      SCOPED_TRACE(Joined(cmd) + ": " + Describe(r));
      ASSERT_TRUE(r.exited);
      EXPECT_TRUE(r.code == 0 || r.code == 2 || r.code == 3)
          << "0 ok, 2 corruption, 3 not found; nothing else";
      EXPECT_EQ(r.out.find("out of memory"), std::string::npos);
      if (cmd.back() == "STORE" && (cmd[0] == "verify" || cmd[1] == "verify")) {
        EXPECT_EQ(r.code, 2) << "verify must report every hostile store";
      }
      corruption += r.code == 2;
    }
    EXPECT_GT(corruption, 0) << "read as if it were fine";
  }
}

// -- Python ------------------------------------------------------------------

// The child: argv = store, healthy store, scratch directory, margin. Warms up
// on the healthy store (imports, thread pools and allocator arenas the reads
// create lazily), measures its own size, limits its address space, reads the
// hostile store every way, and prints one line per call. Exit codes: 0 done
// with at least one Corruption, 10 the warm-up failed, 11 a call raised
// anything but CorruptionError or KeyError, 12 no Corruption at all, 13
// verify did not report the store.
constexpr const char* kPythonChild = R"PY(
import os, resource, sys, traceback
import numpy as np
import runstore
try:
    import pyarrow
    import pyarrow.parquet
    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)
except ImportError:
    pyarrow = None

store_path, healthy, scratch, margin = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
calls = 0

def read_all(path, tag):
    """Every read of the package on the store at `path`, in both on_damaged modes. Returns
    (number of CorruptionErrors, whether verify reported a problem, the first other error)."""
    global calls
    corruption, verified = 0, False
    for mode in ("raise", "skip"):
        def call(what, fn):
            nonlocal corruption, verified
            global calls
            calls += 1
            try:
                fn()
                print(f"{mode} {what}: ok")
            except runstore.CorruptionError as e:
                corruption += 1
                verified |= what == "verify"
                print(f"{mode} {what}: CorruptionError: {e}")
            except KeyError as e:
                print(f"{mode} {what}: KeyError: {e}")
            except ValueError as e:
                if "no experiment design" not in str(e):  # load_results of a plain store
                    print(f"{mode} {what}: ValueError: {e}")
                    traceback.print_exc()
                    return e
                print(f"{mode} {what}: ValueError: {e}")
            except BaseException as e:
                print(f"{mode} {what}: {type(e).__name__}: {e}")
                traceback.print_exc()
                return e
            return None
        s = None
        def open_it():
            nonlocal s
            s = runstore.open(path, mode="r", on_damaged=mode)
        e = call("open", open_it)
        if e is not None:
            return corruption, verified, e
        if s is None:
            continue
        ops = [("names", s.names), ("series", s.series), ("runs", s.runs),
               ("damaged_segments", lambda: s.damaged_segments)]
        try:
            everything = s._core.names(True)
        except runstore.CorruptionError:
            everything = ["ok", "x", "s"]
        def aligned(n):
            try:
                s._core.scan_aligned("ok", [n], ids=True)
            except ValueError as e:  # a series (or base) of a type it does not read
                if "scan_aligned reads those only" not in str(e) and "not of scalars" not in str(e):
                    raise
        def aligned_runs(n):
            try:
                s._core.read_aligned([0, 1, 2, "a", "zz"], [n])
            except ValueError as e:  # a series of a type it does not read
                if "scan_aligned reads those only" not in str(e):
                    raise
        for n in everything:
            ops.append((f"scan {n!r}", lambda n=n: s.scan(n)))
            ops.append((f"scan {n!r} keys=False", lambda n=n: s.scan(n, keys=False)))
            ops.append((f"scan_aligned {n!r}", lambda n=n: aligned(n)))
            ops.append((f"read_aligned {n!r}", lambda n=n: aligned_runs(n)))
        ops.append(("to_pandas", s.to_pandas))
        ops.append(("load_results", lambda: runstore.load_results(s)))
        ops.append(("export_tar", lambda: s.export_tar(os.path.join(scratch, f"{tag}.tar.gz"))))
        if pyarrow is not None:
            ops.append(("to_arrow", s.to_arrow))
            ops.append(("export_parquet",
                        lambda: s.export_parquet(os.path.join(scratch, f"{tag}.parquet"))))
        ops.append(("verify", s.verify))
        for what, fn in ops:
            e = call(what, fn)
            if e is not None:
                return corruption, verified, e
    return corruption, verified, None

if not os.path.exists(healthy):
    with runstore.open(healthy).writer() as w:
        w.log_many(np.arange(10), ok=np.arange(10) * 0.5, x=np.arange(10) * 0.25)
        w.log("r", s="v")
c, _, e = read_all(healthy, "warm")
if e is not None or c:
    print("the warm-up on the healthy store failed")
    sys.exit(10)
with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) << 10 for l in f if l.startswith("VmSize:"))
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store_path) for f in fs)
limit = vm + size + margin
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print(f"limited to {limit >> 20} MiB: VmSize {vm >> 20} MiB + the store's {size} bytes + margin")
c, verified, e = read_all(store_path, "hostile")
sys.exit(11 if e is not None else 12 if c == 0 else 13 if not verified else 0)
)PY";

TEST_F(HostileFrontendsTest, PythonNeverAllocatesMoreThanTheFileHolds) {
  if (kSanitized) GTEST_SKIP() << "address-space limits do not apply under a sanitizer";
  const char* env = std::getenv("RUNSTORE_PYTHON");
  if (env == nullptr || *env == '\0') {
    GTEST_SKIP() << "RUNSTORE_PYTHON is not set: set it to a Python with the runstore package "
                    "(scripts/test.sh sets it to .venv/bin/python)";
  }
  const std::string python = env;
  const ChildResult probe =
      RunChild({python, "-c", "import runstore._core"}, 0, dir_.path() + "/log");
  if (!probe.exited || probe.code != 0) {
    GTEST_SKIP() << python << " cannot import runstore: " << probe.out;
  }
  const std::string scratch = dir_.path() + "/scratch";
  fs::create_directories(scratch);
  const std::string healthy = dir_.path() + "/py_healthy";
  const std::vector<Case> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const std::string store = dir_.path() + "/case" + std::to_string(i);
    ASSERT_OK(testing::WriteCraftedStore(Env::Default(), store, cases[i].files()));
    const ChildResult r = RunChild(
        {python, "-c", kPythonChild, store, healthy, scratch, std::to_string(kMarginBytes)}, 0,
        dir_.path() + "/log");
    EXPECT_TRUE(r.exited && r.code == 0)
        << "10 the warm-up failed, 11 an error other than CorruptionError or KeyError (out of "
           "memory?), 12 no Corruption reported, 13 verify did not report it; "
        << Describe(r);
  }
}

}  // namespace
}  // namespace runstore
