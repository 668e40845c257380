// Misuse (docs/reliability.md, "Surfaces a user touches"): what a careless or
// hostile user puts in place of a store's files, and the limits a reader may
// run under.
//
// - Special files in place of every file a store has (the marker, segments/,
//   a sealed and a crashed writer's segment, the catalog and its
//   temporaries, the attributes, compaction claims, leases and temporaries):
//   a FIFO, a socket, a directory, a symbolic link out of the store, a link
//   to a device, a sparse file of 256 GiB, a file the reader may not read.
//   Each must give a clear error naming the file or be left out and
//   reported; never hang (each case runs in a child process with an alarm,
//   so that a hang fails the case instead of the suite), never crash, never
//   allocate beyond what the files hold (RLIMIT_AS in the child).
// - A reader without write permission (an unprivileged user) and a store on
//   a read-only file system: every reading operation works; writing gives a
//   clear error.
// - Thousands of segments left by crashed writers, read under a limit of 64
//   descriptors: opening, refreshing, scans, lookups, verify and the CLI
//   work and read every record; running out of descriptors or memory is
//   ResourceExhausted, never damage, and never skipped as damage.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "env/path.h"
#include "format/format.h"
#include "runstore/store.h"
#include "store/read/segment_cache.h"
#include "testing/crafted_segment.h"
#include "testing/test_util.h"

namespace runstore {

using read::SegmentCache;
namespace {

namespace fs = std::filesystem;
using ::runstore::testing::Contents;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValue;
using ::runstore::testing::ScanAll;
using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::TempDir;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizers reserve terabytes of address space
#else
constexpr bool kSanitized = false;
#endif

// A case that hangs is killed by this alarm and fails; generous, so that a
// slow (sanitized, loaded) machine never trips it on a case that finishes.
constexpr unsigned kAlarmSeconds = 120;
// The address space a child may take beyond what it had: the store's bytes
// are far smaller. A sparse file's apparent size is never allocated.
constexpr uint64_t kMarginBytes = uint64_t{256} << 20;
constexpr uid_t kNobody = 65534;

uint64_t AddressSpaceBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) << 10;
  }
  return 0;
}

struct ChildLimits {
  bool address_space = false;  // limit it to what it has + kMarginBytes
  rlim_t open_files = 0;       // 0: unchanged
  bool as_nobody = false;      // drop root for an unprivileged user
};

struct ChildResult {
  bool exited = false;
  int code = -1;
  int signal = 0;
  std::string output;  // what the child wrote to its `out`
  bool ok() const { return exited && code == 0; }
  std::string Describe() const {
    std::string s = exited ? "exit code " + std::to_string(code)
                           : std::string("killed by ") + strsignal(signal) +
                                 (signal == SIGALRM ? " (it hung)" : "");
    return s + (output.empty() ? "" : ":\n" + output);
  }
};

// Runs `body` in a forked child under `limits`, with an alarm: a hang is
// SIGALRM, a crash its own signal. `body` writes what it found to `out` and
// returns the child's exit code.
ChildResult RunChild(const ChildLimits& limits, const std::function<int(FILE* out)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    FILE* out = ::fdopen(fds[1], "w");
    ::alarm(kAlarmSeconds);
    if (limits.as_nobody &&
        (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0)) {
      std::fprintf(out, "cannot become nobody: %s\n", std::strerror(errno));
      std::fflush(out);
      ::_exit(90);
    }
    if (limits.open_files != 0) {
      const rlimit rl{limits.open_files, limits.open_files};
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(91);
    }
    if (limits.address_space && !kSanitized) {
      const uint64_t limit = AddressSpaceBytes() + kMarginBytes;
      const rlimit rl{limit, limit};
      if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(92);
    }
    const int rc = body(out);
    std::fflush(out);
    ::_exit(rc);
  }
  ::close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return r;
}

// Runs `argv` (the CLI) in a child under `limits`, its stdout and stderr
// in the result's output; `setup`, if given, runs in the child first (an
// environment variable, a limit of its own).
ChildResult RunProgram(const ChildLimits& limits, const std::vector<std::string>& argv,
                       const std::function<void()>& setup = {}) {
  return RunChild(limits, [&](FILE* out) {
    if (setup) setup();
    ::dup2(::fileno(out), 1);
    ::dup2(::fileno(out), 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    return 127;
  });
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// Whether `s` is an error a user can act on: a code other than running out
// of a resource, a message that names `name`.
bool ClearError(const Status& s, const std::string& name) {
  return !s.ok() && s.code() != StatusCode::kResourceExhausted &&
         s.message().find(name) != std::string::npos;
}

// Every record of `got` is in `expected` with the same value.
bool IsSubset(const Contents& got, const Contents& expected) {
  for (const auto& [k, v] : got) {
    auto it = expected.find(k);
    if (it == expected.end() || !(it->second == v)) return false;
  }
  return true;
}

// A store as a sweep leaves it: two writers' sealed segments with resume
// markers and overwrites, a crashed writer's unsealed segment, a catalog.
void BuildStore(const std::string& path) {
  auto store = Store::Open(path, {});
  ASSERT_OK(store.status());
  for (const char* id : {"a", "b"}) {
    WriterOptions wo;
    wo.writer_id = id;
    ASSERT_OK_AND_ASSIGN(auto w, (*store)->NewWriter(wo));
    for (int64_t run = 0; run < 6; ++run) {
      for (int64_t step = 0; step < 5; ++step) {
        ASSERT_OK(w->Append(RunRef(run), "loss", step, run + step * 0.5));
      }
    }
    ASSERT_OK(w->Commit());
    ASSERT_OK(w->Resume(RunRef(int64_t{2}), 3));
    ASSERT_OK(w->Append(RunRef(int64_t{1}), "loss", 0, id[0] * 1.0));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK((*store)->WriteCatalog().status());
  // A crashed writer's segment: committed, never sealed.
  testing::SegmentCrafter c("c", 1);
  c.AddBlock(
      testing::ScalarBlock("loss", {RunId(int64_t{7}), RunId(int64_t{7})}, {0, 1}, {7.0, 7.5}));
  c.AddCommit();
  WriteFile(path + "/segments/c-00000001.rss", c.bytes());
}

Contents ReadAllOrDie(const std::string& path) {
  auto store = Store::Open(path, {.read_only = true});
  EXPECT_OK(store.status());
  if (!store.ok()) return {};
  auto c = ScanAll(*(*store)->GetSnapshot());
  EXPECT_OK(c.status());
  return c.ok() ? *c : Contents();
}

// What a user leaves in place of a file.
enum class Misuse {
  kFifo,
  kSocket,
  kDirectory,
  kLinkOut,     // a symbolic link to a copy of the file outside the store
  kLinkDevice,  // a symbolic link to /dev/zero
  kSparse,      // the file (or an empty one) grown to 256 GiB by a hole
  kUnreadable,  // mode 000, read by an unprivileged user
};

const char* MisuseName(Misuse m) {
  switch (m) {
    case Misuse::kFifo:
      return "FIFO";
    case Misuse::kSocket:
      return "socket";
    case Misuse::kDirectory:
      return "directory";
    case Misuse::kLinkOut:
      return "link out of the store";
    case Misuse::kLinkDevice:
      return "link to /dev/zero";
    case Misuse::kSparse:
      return "sparse 256 GiB";
    case Misuse::kUnreadable:
      return "unreadable";
  }
  return "?";
}

// The files of a store, by path relative to it, and whether each is a
// segment (which reading may leave out as damaged).
struct Target {
  const char* rel;
  bool segment;
};
constexpr Target kTargets[] = {
    {"RUNSTORE", false},
    {"segments", false},
    {"segments/a-00000001.rss", true},  // sealed
    {"segments/c-00000001.rss", true},  // a crashed writer's, unsealed
    {"segments/z-00000001.rss", true},  // a name no writer used
    {"CATALOG", false},
    {"CATALOG.tmp.00000000deadbeef", false},
    {"RUNSTORE.tmp.1", false},
    {"ATTRS", false},
    {"segments/b-00000001.rss.claim", false},
    {"segments/compact.00000000deadbeef.lease", false},
    {"segments/compact.00000000deadbeef-00000001.rss.tmp", false},
};

// Puts `m` in place of `store`/`rel`; `outside` is a directory outside the
// store. False (with a reason) where the misuse does not apply.
bool Apply(Misuse m, const std::string& store, const std::string& rel, const std::string& outside,
           std::string* why_not) {
  const std::string path = store + "/" + rel;
  const bool existed = fs::exists(fs::symlink_status(path));
  const bool was_dir = existed && fs::is_directory(path);
  const std::string copy = outside + "/copy";
  if (existed) {
    fs::copy(path, copy, fs::copy_options::recursive);
  } else {
    WriteFile(copy, "x\n");
  }
  // A directory in place of segments/ is segments/ emptied: a store with no
  // segment, as a user may make it. A device or a sparse file have no
  // directory to be.
  if ((m == Misuse::kSparse || m == Misuse::kLinkDevice || m == Misuse::kDirectory) && was_dir) {
    *why_not = "a directory";
    return false;
  }
  fs::remove_all(path);
  switch (m) {
    case Misuse::kFifo:
      return ::mkfifo(path.c_str(), 0644) == 0;
    case Misuse::kSocket: {
      // Bound by a name relative to its directory: sun_path is short.
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      const std::string name = fs::path(path).filename().string();
      std::strncpy(addr.sun_path, name.c_str(), sizeof(addr.sun_path) - 1);
      const fs::path cwd = fs::current_path();
      fs::current_path(fs::path(path).parent_path());
      const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      fs::current_path(cwd);
      ::close(fd);
      return ok;
    }
    case Misuse::kDirectory:
      return fs::create_directory(path);
    case Misuse::kLinkOut:
      fs::create_symlink(copy, path);
      return true;
    case Misuse::kLinkDevice:
      fs::create_symlink("/dev/zero", path);
      return true;
    case Misuse::kSparse:
      fs::copy(copy, path);
      return ::truncate(path.c_str(), off_t{256} << 30) == 0;
    case Misuse::kUnreadable:
      fs::copy(copy, path, fs::copy_options::recursive);
      return ::chmod(path.c_str(), 0) == 0;
  }
  return false;
}

// The reading (and, unless `writes_fail`, writing) operations on `store`
// after a misuse of `target`, checked: what reads is exact or a subset with
// the left-out segments named, and every error is clear. Returns the exit
// code for RunChild (0: all as it must be), having written what went wrong.
int CheckEverything(FILE* out, const std::string& store, const Target& target,
                    const Contents& expected, bool writes_fail, bool link = false) {
  const std::string name = fs::path(target.rel).filename().string();
  int bad = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(out, "%s\n", what.c_str());
    ++bad;
  };
  auto check_error = [&](const char* op, const Status& s) {
    if (!ClearError(s, name))
      fail(std::string(op) + ": not a clear error naming " + name + ": " + s.ToString());
  };
  // Strict: exact, or a clear error.
  {
    auto s = Store::Open(store, {.read_only = true});
    if (s.ok()) {
      auto got = ScanAll(*(*s)->GetSnapshot());
      if (!got.ok()) {
        check_error("strict scan", got.status());
      } else if (*got != expected) {
        fail("strict open read differently: " + testing::DiffContents(expected, *got));
      }
    } else {
      check_error("strict open", s.status());
    }
    // A link in place of a file that opening reads is never followed.
    const bool read_at_open = target.segment || std::string(target.rel) == "RUNSTORE";
    if (link && read_at_open &&
        (s.ok() || s.status().message().find("is a symbolic link") == std::string::npos)) {
      fail("a link in place of " + name + " was followed: " + s.status().ToString());
    }
  }
  // Around damage: a subset, exact unless a segment was left out, and every
  // segment left out named.
  {
    auto s = Store::Open(store, {.read_only = true, .on_damaged = OnDamaged::kSkip});
    if (s.ok()) {
      auto snap = (*s)->GetSnapshot();
      for (const DamagedSegment& d : snap->DamagedSegments()) {
        if (!target.segment || d.file != target.rel)
          fail("left out " + d.file + ": " + d.status.ToString());
        check_error("left out", d.status);
      }
      auto got = ScanAll(*snap);
      if (!got.ok()) {
        check_error("scan", got.status());
      } else if (snap->DamagedSegments().empty() ? *got != expected : !IsSubset(*got, expected)) {
        fail("read differently: " + testing::DiffContents(expected, *got));
      } else {
        for (const auto& [k, v] : *got) {
          auto g = snap->Get(k.run, k.series, k.step);
          if (!g.ok()) {
            fail("get " + testing::KeyString(k) + ": " + g.status().ToString());
            break;
          }
        }
      }
      const VerifyReport r = snap->VerifyAll();
      if (!r.unchecked.empty()) fail("verify left unchecked: " + r.unchecked.front().ToString());
      for (const Status& p : r.problems) check_error("verify", p);
    } else {
      check_error("open skipping damage", s.status());
    }
  }
  // Writing: works, or a clear error (always one when `writes_fail`).
  auto s = Store::Open(store, {.create_if_missing = false, .on_damaged = OnDamaged::kSkip});
  if (!s.ok()) {
    check_error("open for writing", s.status());
    return bad == 0 ? 0 : 1;
  }
  WriterOptions wo;
  wo.writer_id = "m";
  auto w = (*s)->NewWriter(wo);
  Status ws = w.status();
  if (w.ok()) {
    ws = (*w)->Append(RunRef(int64_t{100}), "loss", 0, 1.0);
    if (ws.ok()) ws = (*w)->Commit();
    Status c = (*w)->Close();
    if (ws.ok()) ws = c;
  }
  if (writes_fail && ws.ok()) fail("a writer wrote into a store it may not write");
  if (!ws.ok() && ws.code() == StatusCode::kResourceExhausted) fail("writer: " + ws.ToString());
  CompactOptions co;
  co.retain_inputs_s = 0;
  co.lease_expiry_s = 0.01;
  co.lease_refresh_s = 0.01;
  CompactReport report;
  Status cs = (*s)->Compact(co, &report);
  if (writes_fail && cs.ok() && !report.inputs.empty()) fail("compacted a store it may not write");
  if (!cs.ok() && (cs.code() == StatusCode::kResourceExhausted || cs.message().empty())) {
    fail("compact: " + cs.ToString());
  }
  auto cat = (*s)->WriteCatalog();
  if (writes_fail && cat.ok()) fail("wrote a catalog into a store it may not write");
  // What was read is still read, around what a user left.
  auto again = Store::Open(store, {.read_only = true, .on_damaged = OnDamaged::kSkip});
  if (again.ok()) {
    auto got = ScanAll(*(*again)->GetSnapshot());
    Contents want = expected;
    if (ws.ok())
      want[RecordKey{"loss", RunId(int64_t{100}), 0}] =
          RecordValue{DType::kFloat64, {}, std::string("\0\0\0\0\0\0\xf0\x3f", 8)};
    if (got.ok() && (*again)->GetSnapshot()->DamagedSegments().empty() && *got != want) {
      fail("after writing, read differently: " + testing::DiffContents(want, *got));
    }
  }
  return bad == 0 ? 0 : 1;
}

TEST(MisuseTest, SpecialFilesInPlaceOfEveryFileOfAStore) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);  // an unprivileged reader must reach the stores
  const std::string pristine = dir.path() + "/pristine";
  ASSERT_NO_FATAL_FAILURE(BuildStore(pristine));
  const Contents expected = ReadAllOrDie(pristine);
  ASSERT_FALSE(expected.empty());
  int cases = 0, skipped = 0;
  for (const Target& target : kTargets) {
    for (Misuse m : {Misuse::kFifo, Misuse::kSocket, Misuse::kDirectory, Misuse::kLinkOut,
                     Misuse::kLinkDevice, Misuse::kSparse, Misuse::kUnreadable}) {
      const std::string name = std::string(target.rel) + " as " + MisuseName(m);
      const std::string base = dir.path() + "/case" + std::to_string(cases + skipped);
      fs::create_directories(base + "/outside");
      const std::string store = base + "/store";
      fs::copy(pristine, store, fs::copy_options::recursive);
      std::string why_not;
      if (!Apply(m, store, target.rel, base + "/outside", &why_not)) {
        ASSERT_FALSE(why_not.empty()) << name << ": could not be made: " << std::strerror(errno);
        ++skipped;
        continue;
      }
      ++cases;
      const bool nobody = m == Misuse::kUnreadable;
      if (nobody) {
        // The copies are root's (0644, directories 0755): the unprivileged
        // reader may read every file but the unreadable one, and write none.
        for (const auto& e : fs::recursive_directory_iterator(base)) {
          if (e.path().string() != store + "/" + target.rel && !e.is_symlink()) {
            fs::permissions(e.path(), e.is_directory() ? fs::perms(0755) : fs::perms(0644));
          }
        }
        ::chmod(base.c_str(), 0755);
      }
      const ChildResult r = RunChild({.address_space = true, .as_nobody = nobody}, [&](FILE* out) {
        return CheckEverything(out, store, target, expected, /*writes_fail=*/nobody,
                               m == Misuse::kLinkOut || m == Misuse::kLinkDevice);
      });
      EXPECT_TRUE(r.ok()) << name << ": " << r.Describe();
      fs::remove_all(base);
    }
  }
  std::printf("[ misuse ] %d special-file cases (%d files x 7 misuses, %d not applicable)\n", cases,
              static_cast<int>(std::size(kTargets)), skipped);
}

// An unprivileged user who may read a store and write nothing: reading
// works, writing is refused with a clear error.
TEST(MisuseTest, AReaderWithoutWritePermissionReadsEverything) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string store = dir.path() + "/store";
  ASSERT_NO_FATAL_FAILURE(BuildStore(store));
  const Contents expected = ReadAllOrDie(store);
  const ChildResult r = RunChild({.address_space = true, .as_nobody = true}, [&](FILE* out) {
    const Target whole{"RUNSTORE", false};
    return CheckEverything(out, store, whole, expected, /*writes_fail=*/true);
  });
  EXPECT_TRUE(r.ok()) << r.Describe();
}

// A store on a read-only file system (a tmpfs remounted read-only: root
// writes through permissions, not through a read-only mount).
TEST(MisuseTest, AStoreOnAReadOnlyFileSystemReadsEverything) {
  TempDir dir;
  const std::string mnt = dir.path() + "/mnt";
  fs::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "): the read-only file system case needs root";
  }
  const std::string store = mnt + "/store";
  BuildStore(store);
  const Contents expected = ReadAllOrDie(store);
  ASSERT_EQ(::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  const ChildResult r = RunChild({.address_space = true}, [&](FILE* out) {
    const Target whole{"RUNSTORE", false};
    int rc = CheckEverything(out, store, whole, expected, /*writes_fail=*/true);
    // The writer's error says why.
    auto s = Store::Open(store, {.create_if_missing = false});
    if (s.ok()) {
      WriterOptions wo;
      wo.writer_id = "m";
      auto w = (*s)->NewWriter(wo);
      Status ws = w.ok() ? (*w)->Append(RunRef(int64_t{1}), "x", 0, 1.0) : w.status();
      if (w.ok() && ws.ok()) ws = (*w)->Commit();
      if (ws.ok() || ws.message().find("Read-only file system") == std::string::npos) {
        std::fprintf(out, "writer on a read-only file system: %s\n", ws.ToString().c_str());
        rc = 1;
      }
    }
    return rc;
  });
  EXPECT_TRUE(r.ok()) << r.Describe();
#ifdef RUNSTORE_CLI_PATH
  // The CLI reads it, and exports elsewhere.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"info", store},
                                               {"ls", store},
                                               {"cat", store, "loss"},
                                               {"verify", store},
                                               {"export", "csv", store, dir.path() + "/csv"}}) {
    std::vector<std::string> argv{RUNSTORE_CLI_PATH, "--no-progress"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ChildResult c = RunProgram({}, argv);
    EXPECT_TRUE(c.ok()) << args[0] << ": " << c.Describe();
  }
#endif
  EXPECT_EQ(::umount2(mnt.c_str(), MNT_DETACH), 0) << std::strerror(errno);
}

// The records of the crashed writers' segments below: run i of series "v"
// holds i, i + 0.5 and i + 0.25 at steps 0, 1 and 2.
constexpr int kCrashedSegments = 3000;

RecordValue DoubleValue(double v) {
  return RecordValue{DType::kFloat64, {}, std::string(reinterpret_cast<const char*>(&v), 8)};
}

// A store holding kCrashedSegments unsealed segments, each one crashed
// writer's (crafted: one commit, never sealed), and the segments of 4 real
// writer processes killed with SIGKILL after a commit.
void BuildCrashedStore(const std::string& path, Contents* expected) {
  ASSERT_OK(Store::Open(path, {}).status());
  for (int i = 0; i < kCrashedSegments; ++i) {
    testing::SegmentCrafter c("u" + std::to_string(i), 1);
    const double v = i;
    c.AddBlock(testing::ScalarBlock("v", {RunId(int64_t{i}), RunId(int64_t{i}), RunId(int64_t{i})},
                                    {0, 1, 2}, {v, v + 0.5, v + 0.25}));
    c.AddCommit();
    WriteFile(path + "/segments/" + format::SegmentFileName("u" + std::to_string(i), 1), c.bytes());
    (*expected)[RecordKey{"v", RunId(int64_t{i}), 0}] = DoubleValue(v);
    (*expected)[RecordKey{"v", RunId(int64_t{i}), 1}] = DoubleValue(v + 0.5);
    (*expected)[RecordKey{"v", RunId(int64_t{i}), 2}] = DoubleValue(v + 0.25);
  }
  for (int k = 0; k < 4; ++k) {
    const ChildResult r = RunChild({}, [&](FILE* out) {
      auto store = Store::Open(path, {});
      WriterOptions wo;
      wo.writer_id = "k" + std::to_string(k);
      auto w =
          store.ok() ? (*store)->NewWriter(wo) : Result<std::unique_ptr<Writer>>(store.status());
      Status s = w.status();
      for (int64_t step = 0; s.ok() && step < 10; ++step) {
        s = (*w)->Append(RunRef(int64_t{-1 - k}), "v", step, step * 2.0);
      }
      if (s.ok()) s = (*w)->Commit();
      if (!s.ok()) {
        std::fprintf(out, "%s\n", s.ToString().c_str());
        return 1;
      }
      std::fflush(out);
      ::kill(::getpid(), SIGKILL);  // a crash after the commit: never sealed
      return 2;
    });
    ASSERT_EQ(r.signal, SIGKILL) << r.Describe();
    for (int64_t step = 0; step < 10; ++step) {
      (*expected)[RecordKey{"v", RunId(int64_t{-1 - k}), step}] = DoubleValue(step * 2.0);
    }
  }
}

int CountOpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Reads `snap` whole against `expected`: a scan, a Get of every record and a
// verify, each thing wrong named through `fail` (after `when`), `between`
// called after each of the three. Returns the verify report.
VerifyReport CheckReadsBack(
    const Snapshot& snap, const Contents& expected, const std::string& when,
    const std::function<void(const std::string&)>& fail,
    const std::function<void()>& between = [] {}) {
  const std::string at = when.empty() ? "" : when + " ";
  auto got = ScanAll(snap);
  if (!got.ok() || *got != expected) {
    fail(at +
         "scan: " + (got.ok() ? testing::DiffContents(expected, *got) : got.status().ToString()));
  }
  between();
  for (const auto& [k, v] : expected) {
    auto g = snap.Get(k.run, k.series, k.step);
    if (!g.ok() || std::string(g->data(), g->nbytes()) != v.bytes) {
      fail(at + "get " + testing::KeyString(k) + ": " +
           (g.ok() ? "wrong value" : g.status().ToString()));
      break;
    }
  }
  between();
  VerifyReport report = snap.VerifyAll();
  if (!report.problems.empty() || !report.unchecked.empty()) {
    fail(at + "verify: " + std::to_string(report.problems.size()) + " problems, " +
         std::to_string(report.unchecked.size()) + " unchecked" +
         (report.problems.empty() ? "" : ": " + report.problems.front().ToString()));
  }
  between();
  return report;
}

// docs/design.md#catalog: a segment being written, or left by a crashed
// writer, holds no descriptor between refreshes, and the process's budget
// bounds the mappings and descriptors of every segment read.
TEST(OpenFilesTest, ThousandsOfCrashedWritersSegmentsNeedABoundedNumberOfDescriptors) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  Contents expected;
  ASSERT_NO_FATAL_FAILURE(BuildCrashedStore(path, &expected));
  constexpr rlim_t kLimit = 64;
  const ChildResult r = RunChild({.open_files = kLimit}, [&](FILE* out) {
    int bad = 0;
    auto fail = [&](const std::string& what) {
      std::fprintf(out, "%s\n", what.c_str());
      ++bad;
    };
    auto store = Store::Open(path, {});
    if (!store.ok()) {
      fail("open: " + store.status().ToString());
      return 1;
    }
    const RefreshStats st = (*store)->last_refresh();
    if (st.recovered != kCrashedSegments + 4) {
      fail("recovered " + std::to_string(st.recovered) + " segments");
    }
    const VerifyReport report = CheckReadsBack(*(*store)->GetSnapshot(), expected, "", fail);
    if (report.segments != kCrashedSegments + 4) {
      fail("verify: " + std::to_string(report.segments) + " segments");
    }
    // A live writer commits beside them; refreshing readers see it.
    WriterOptions wo;
    wo.writer_id = "live";
    auto w = (*store)->NewWriter(wo);
    Status s = w.status();
    if (s.ok()) s = (*w)->Append(RunRef(int64_t{-100}), "v", 0, 3.0);
    if (s.ok()) s = (*w)->Commit();
    auto fresh = (*store)->Refresh();
    if (!s.ok() || !fresh.ok() || !(*fresh)->Get(RunRef(int64_t{-100}), "v", 0).ok()) {
      fail("live writer: " + s.ToString() + " / " + fresh.status().ToString());
    }
    if (s.ok()) s = (*w)->Close();
    for (int i = 0; i < 3; ++i) {
      if (auto again = (*store)->Refresh(); !again.ok())
        fail("refresh: " + again.status().ToString());
    }
    const size_t files = SegmentCache::Process().held(SegmentCache::kFile);
    const size_t maps = SegmentCache::Process().held(SegmentCache::kMapping);
    if (files > SegmentCache::Process().limits().files ||
        maps > SegmentCache::Process().limits().mappings) {
      fail("the budget holds " + std::to_string(files) + " descriptors, " + std::to_string(maps) +
           " mappings");
    }
    std::fprintf(out, "open descriptors at the end: %d of %d\n", CountOpenDescriptors(),
                 static_cast<int>(kLimit));
    return bad == 0 ? 0 : 1;
  });
  EXPECT_TRUE(r.ok()) << r.Describe();
#ifdef RUNSTORE_CLI_PATH
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"info", path}, {"cat", path, "v"}, {"verify", path}}) {
    std::vector<std::string> argv{RUNSTORE_CLI_PATH, "--no-progress"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ChildResult c = RunProgram({.open_files = kLimit}, argv);
    EXPECT_TRUE(c.ok()) << args[0] << ": " << c.Describe().substr(0, 2000);
    if (args[0] == "cat") {
      // Every record, one line each.
      // A header line, every record, and the live writer's.
      EXPECT_EQ(std::count(c.output.begin(), c.output.end(), '\n'),
                static_cast<long>(expected.size()) + 2)
          << c.output.substr(0, 500);
    }
  }
#endif
  std::printf("[ open files ] %d crashed writers' segments read under a limit of %d descriptors\n",
              kCrashedSegments + 4, static_cast<int>(kLimit));
}

// A store of thousands of segments of every kind (sealed, unsealed ones of
// crashed writers, compacted) under a budget of 64 mappings and 8 open
// segment files, in a process limited to 64 descriptors: read, verified,
// compacted (adopting the crashed writers' segments) and exported, every
// record right, the budget never exceeded.
TEST(OpenFilesTest, AStoreOfThousandsOfSegmentsOfEveryKindWorksUnderABudgetOfSixtyFour) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  Contents expected;
  ASSERT_NO_FATAL_FAILURE(BuildCrashedStore(path, &expected));
  constexpr int kSealed = 1000;
  {
    // kSealed sealed segments: a writer opened, given one record and closed
    // for each; the first half compacted before the second is written.
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
    for (int half = 0; half < 2; ++half) {
      for (int i = half * kSealed / 2; i < (half + 1) * kSealed / 2; ++i) {
        WriterOptions wo;
        wo.writer_id = "sealed";
        ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
        ASSERT_OK(w->Append(RunRef(int64_t{100000 + i}), "v", 0, i * 3.0));
        ASSERT_OK(w->Close());
        expected[RecordKey{"v", RunId(int64_t{100000 + i}), 0}] = DoubleValue(i * 3.0);
      }
      if (half == 0) {
        CompactOptions co;
        co.retain_inputs_s = 0;
        CompactReport report;
        ASSERT_OK(store->Compact(co, &report));
        ASSERT_GE(report.inputs.size(), static_cast<size_t>(kSealed / 2));
      }
    }
  }
  constexpr rlim_t kLimit = 64;
  const SegmentBudget budget{64, 8};
  size_t segments = 0;
  const ChildResult r = RunChild({.open_files = kLimit}, [&](FILE* out) {
    int bad = 0;
    auto fail = [&](const std::string& what) {
      std::fprintf(out, "%s\n", what.c_str());
      ++bad;
    };
    if (Status s = SetSegmentBudget(budget); !s.ok()) fail("budget: " + s.ToString());
    auto within_budget = [&](const char* when) {
      const size_t maps = SegmentCache::Process().held(SegmentCache::kMapping);
      const size_t files = SegmentCache::Process().held(SegmentCache::kFile);
      if (maps > budget.mappings || files > budget.files) {
        fail(std::string(when) + ": the budget holds " + std::to_string(maps) + " mappings and " +
             std::to_string(files) + " descriptors");
      }
    };
    auto check = [&](Store* store, const char* when) {
      return CheckReadsBack(*store->GetSnapshot(), expected, when, fail,
                            [&] { within_budget(when); })
          .segments;
    };
    auto store = Store::Open(path, {});
    if (!store.ok()) {
      fail("open: " + store.status().ToString());
      return 1;
    }
    std::fprintf(out, "segments=%zu\n", check(store->get(), "before compaction"));
    CompactOptions co;
    co.retain_inputs_s = 0;
    co.adopt_unsealed = true;
    CompactReport report;
    if (Status s = (*store)->Compact(co, &report); !s.ok()) fail("compact: " + s.ToString());
    if (report.adopted.size() != static_cast<size_t>(kCrashedSegments + 4)) {
      fail("compaction adopted " + std::to_string(report.adopted.size()) + " segments");
    }
    within_budget("compaction");
    auto after = Store::Open(path, {});
    if (!after.ok()) {
      fail("open after compaction: " + after.status().ToString());
      return 1;
    }
    check(after->get(), "after compaction");
    return bad == 0 ? 0 : 1;
  });
  ASSERT_TRUE(r.ok()) << r.Describe();
  std::sscanf(r.output.c_str(), "segments=%zu", &segments);
  EXPECT_GE(segments, static_cast<size_t>(kCrashedSegments + 4 + kSealed / 2));
#ifdef RUNSTORE_CLI_PATH
  // The command line under the same limits, its budget set by the environment.
  const std::string csv = dir.path() + "/csv";
  const ChildResult c = RunProgram(
      {.open_files = kLimit}, {RUNSTORE_CLI_PATH, "--no-progress", "export", "csv", path, csv}, [] {
        ::setenv("RUNSTORE_SEGMENT_MAPPINGS", "64", 1);
        ::setenv("RUNSTORE_SEGMENT_FILES", "8", 1);
      });
  ASSERT_TRUE(c.ok()) << c.Describe().substr(0, 2000);
  std::ifstream f(csv + "/v.csv");
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), static_cast<long>(expected.size()) + 1);
  // A budget that is not a number is named, not taken for damage or ignored: the segment
  // budget's, and the page cache's for large values.
  const std::tuple<const char*, const char*, const char*> budgets[] = {
      {"RUNSTORE_SEGMENT_MAPPINGS", "64k", "RUNSTORE_SEGMENT_MAPPINGS='64k' is not a whole number"},
      {"RUNSTORE_CACHED_LARGE_VALUES", "1G",
       "RUNSTORE_CACHED_LARGE_VALUES='1G' is not a whole number from 0"},
  };
  for (const auto& [name, value, says] : budgets) {
    const ChildResult wrong = RunProgram({}, {RUNSTORE_CLI_PATH, "--no-progress", "info", path},
                                         [&] { ::setenv(name, value, 1); });
    EXPECT_FALSE(wrong.ok()) << name;
    EXPECT_NE(wrong.output.find(says), std::string::npos) << wrong.output;
  }
#endif
  std::printf(
      "[ open files ] %zu segments (%d of crashed writers, sealed, compacted) read, verified, "
      "compacted and exported under 64 mappings, 8 segment files and %d descriptors\n",
      segments, kCrashedSegments + 4, static_cast<int>(kLimit));
}

// A budget of nothing is refused, naming it, and the budget stays.
TEST(OpenFilesTest, ABudgetOfNoMappingsOrFilesIsRefused) {
  const SegmentBudget before = GetSegmentBudget();
  ASSERT_GE(before.mappings, 1u);
  ASSERT_GE(before.files, 1u);
  for (const SegmentBudget& b : {SegmentBudget{0, 8}, SegmentBudget{64, 0}}) {
    const Status s = SetSegmentBudget(b);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("each must be at least 1"), std::string::npos) << s.ToString();
    EXPECT_EQ(GetSegmentBudget().mappings, before.mappings);
    EXPECT_EQ(GetSegmentBudget().files, before.files);
  }
}

// An Env whose opens of segment files fail as a process out of descriptors
// fails them (EMFILE), after listing and stat succeeded.
class NoDescriptorsForSegments final : public EnvWrapper {
 public:
  NoDescriptorsForSegments() : EnvWrapper(Env::Default()) {}
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p) override {
    if (p.find("/segments/") != std::string::npos && p.ends_with(".rss")) {
      return ErrnoStatus(p + ": open for reading", EMFILE);  // as the POSIX Env says it
    }
    return target()->NewRandomAccessFile(p);
  }
};

// A segment that cannot be opened for want of descriptors is not damage:
// OnDamaged::kSkip must not leave it out and serve the rest as if it did not
// exist (what `cat --skip-damaged` printed, with exit code 0).
TEST(OpenFilesTest, RunningOutOfDescriptorsIsNeverSkippedAsDamage) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_NO_FATAL_FAILURE(BuildStore(path));
  NoDescriptorsForSegments env;
  for (OnDamaged on_damaged : {OnDamaged::kFail, OnDamaged::kSkip}) {
    auto s = Store::Open(
        path, {.env = &env, .read_only = true, .on_damaged = on_damaged, .use_catalog = false});
    EXPECT_THAT(s.status(), StatusIsWith(StatusCode::kResourceExhausted, "Too many open files"));
  }
}

// The same through the system: a process that has used up its descriptors
// gets ResourceExhausted naming what ran out (errno EMFILE), never damage.
TEST(OpenFilesTest, AProcessOutOfDescriptorsIsToldSo) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_NO_FATAL_FAILURE(BuildStore(path));
  const ChildResult r = RunChild({.open_files = 32}, [&](FILE* out) {
    while (::open("/dev/null", O_RDONLY) >= 0) {
    }
    auto s = Store::Open(path, {.read_only = true, .on_damaged = OnDamaged::kSkip});
    if (s.ok() || s.status().code() != StatusCode::kResourceExhausted ||
        s.status().sys_errno() != EMFILE ||
        s.status().message().find("out of file descriptors") == std::string::npos) {
      std::fprintf(out, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    return 0;
  });
  EXPECT_TRUE(r.ok()) << r.Describe();
}

#ifdef RUNSTORE_CLI_PATH
// Out of memory for a mapping (an address-space limit): `cat --skip-damaged`
// and `verify` say what ran out and exit with 6, never 0 or 2.
TEST(OpenFilesTest, TheCliReportsRunningOutOfMemoryWithItsOwnExitCode) {
  if (kSanitized) GTEST_SKIP() << "address-space limits do not apply under a sanitizer";
  TempDir dir;
  const std::string path = dir.path() + "/store";
  {
    auto store = Store::Open(path, {});
    ASSERT_OK(store.status());
    WriterOptions wo;
    wo.writer_id = "big";
    ASSERT_OK_AND_ASSIGN(auto w, (*store)->NewWriter(wo));
    std::vector<double> big(size_t{48} << 17, 1.5);  // 48 MiB
    const int64_t shape[] = {static_cast<int64_t>(big.size())};
    ASSERT_OK(w->Append(RunRef(int64_t{1}), "big", 0,
                        ValueRef{DType::kFloat64, shape, big.data(), big.size() * 8}));
    ASSERT_OK(w->Close());
  }
  // Starting needs far less than the mapping of the segment.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--skip-damaged", "cat", path, "big"}, {"verify", path}}) {
    std::vector<std::string> argv{RUNSTORE_CLI_PATH, "--no-progress"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ChildResult c = RunProgram({}, argv, [] {
      const rlimit rl{uint64_t{40} << 20, uint64_t{40} << 20};
      ::setrlimit(RLIMIT_AS, &rl);
    });
    EXPECT_TRUE(c.exited && c.code == 6) << args[1] << ": " << c.Describe();
    EXPECT_NE(c.output.find("ResourceExhausted"), std::string::npos) << c.output;
  }
}
#endif

}  // namespace
}  // namespace runstore
