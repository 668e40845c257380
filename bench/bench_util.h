// bench_util.h: helpers shared by the benchmarks in bench/: a scratch store
// directory on the disk under test, a description of the machine, and a
// reporter that prints each target with PASS/MISS after the Google Benchmark
// table. Benchmarks print figures; they never fail a test run.
#ifndef RUNSTORE_BENCH_BENCH_UTIL_H_
#define RUNSTORE_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "runstore/env.h"
#include "runstore/status.h"

namespace runstore::bench {

// Aborts the program with the status message: a benchmark that cannot write
// its store measures nothing.
// The next value of a xorshift64 generator with state *s (nonzero): cheap,
// deterministic data for the benchmarks, the same sequence on every machine.
inline uint64_t XorShift64(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

inline void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::abort();
  }
}
template <typename T>
T CheckValue(Result<T> r, const char* what) {
  Check(r.status(), what);
  return std::move(r).value();
}

// $RUNSTORE_BENCH_DIR, else /var/tmp: a disk-backed directory (on many
// systems /tmp is tmpfs, which would measure memory instead of the disk).
inline std::string BenchBaseDir() {
  const char* env = std::getenv("RUNSTORE_BENCH_DIR");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string("/var/tmp");
}

inline std::string FsTypeName(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    case 0x794C7630:
      return "overlayfs";
    case 0x6969:
      return "nfs";
    case 0x0BD00BD0:
      return "lustre";
    case 0x47504653:
      return "gpfs";
    case 0x2FC12FC1:
      return "zfs";
    case 0x65735546:
      return "fuse";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "0x%lx", static_cast<unsigned long>(s.f_type));
      return buf;
    }
  }
}

inline uint64_t FreeBytes(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * static_cast<uint64_t>(s.f_bsize);
}

inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

inline std::string Kernel() {
  struct utsname u {};
  if (::uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release;
}

// A fresh directory under BenchBaseDir(), removed with everything in it when
// this object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "runstore-bench") {
    std::string tmpl = BenchBaseDir() + "/" + prefix + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      std::perror(("mkdtemp " + tmpl).c_str());
      std::abort();
    }
    path_ = buf.data();
  }
  ~TempDir() { Remove(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }
  void Remove() {
    if (path_.empty() || released_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    released_ = true;
  }
  // Keeps the directory when this object dies.
  void Release() { released_ = true; }

 private:
  std::string path_;
  bool released_ = false;
};

// Removes a path and everything under it, ignoring errors.
inline void RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

// Writes back and evicts every regular file under `dir` from the page cache
// (fdatasync, then POSIX_FADV_DONTNEED), so that the next read comes from the
// disk. Needs no privileges. Returns the number of files evicted.
inline int EvictFromPageCache(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    ++n;
  }
  return n;
}

// The machine, in the benchmark's context block (and JSON output).
inline void AddMachineContext() {
  const std::string dir = BenchBaseDir();
  benchmark::AddCustomContext("cpu_model", CpuModel());
  benchmark::AddCustomContext("nproc", std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)));
  benchmark::AddCustomContext("kernel", Kernel());
  benchmark::AddCustomContext("bench_dir", dir);
  benchmark::AddCustomContext("bench_dir_fs", FsTypeName(dir));
  benchmark::AddCustomContext("bench_dir_free_gib", std::to_string(FreeBytes(dir) >> 30));
  if (FsTypeName(dir) == "tmpfs") {
    std::fprintf(stderr,
                 "warning: %s is tmpfs: these figures measure memory, not a disk; set "
                 "RUNSTORE_BENCH_DIR to a directory on the disk under test\n",
                 dir.c_str());
  }
}

// A target from the performance issue, checked against one counter of every
// run (repetition) of the benchmarks whose name starts with `prefix`.
struct Target {
  std::string prefix;   // benchmark name prefix, e.g. "BM_AppendScalarF64/drain"
  std::string counter;  // "items_per_second", "bytes_per_second", "ratio", ...
  double target;
  bool higher_is_better;
  std::string unit;  // for printing: "records/s", "B/s", "x", "ns"
  std::string what;  // one line: what the target says
};

inline std::vector<Target>& Targets() {
  static std::vector<Target> t;
  return t;
}
inline void AddTarget(Target t) { Targets().push_back(std::move(t)); }

inline std::string Human(double v, const std::string& unit) {
  const char* suffix[] = {"", "k", "M", "G", "T"};
  int i = 0;
  if (unit == "B/s") {
    while (v >= 1024 && i < 4) {
      v /= 1024;
      ++i;
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g %siB/s", v, suffix[i]);
    return buf;
  }
  if (unit == "s") {
    char buf[64];
    if (v < 1e-3) {
      std::snprintf(buf, sizeof(buf), "%.3g us", v * 1e6);
    } else {
      std::snprintf(buf, sizeof(buf), "%.3g ms", v * 1e3);
    }
    return buf;
  }
  if (unit == "x" || unit == "ns" || unit == "us") {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3f %s", v, unit.c_str());
    return buf;
  }
  while (v >= 1000 && i < 4) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g %s%s", v, suffix[i], unit.c_str());
  return buf;
}

// The console table, then one line per target: median, min and max over the
// repetitions, the ratio of the median to the target, and PASS or MISS.
class TargetReporter : public benchmark::ConsoleReporter {
 public:
  explicit TargetReporter(OutputOptions options) : ConsoleReporter(options) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      const std::string name = r.benchmark_name();
      for (size_t t = 0; t < Targets().size(); ++t) {
        const Target& tg = Targets()[t];
        if (name.rfind(tg.prefix, 0) != 0) continue;
        auto c = r.counters.find(tg.counter);
        if (c == r.counters.end()) continue;
        values_[{t, name}].push_back(c->second.value);
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    if (values_.empty()) return;
    std::printf("\nTargets (median over repetitions; min..max):\n");
    for (auto& [key, v] : values_) {
      const Target& tg = Targets()[key.first];
      std::sort(v.begin(), v.end());
      const double med =
          v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
      const bool pass = tg.higher_is_better ? med >= tg.target : med <= tg.target;
      const double ratio = med / tg.target;
      std::printf("  %-6s %-48s %s: %s (%s .. %s) target %s%s = %.3gx of target  [%zu runs]  %s\n",
                  pass ? "PASS" : "MISS", key.second.c_str(), tg.counter.c_str(),
                  Human(med, tg.unit).c_str(), Human(v.front(), tg.unit).c_str(),
                  Human(v.back(), tg.unit).c_str(),
                  tg.higher_is_better ? ">= " : "<= ", Human(tg.target, tg.unit).c_str(), ratio,
                  v.size(), tg.what.c_str());
    }
    std::fflush(stdout);
  }

 private:
  std::map<std::pair<size_t, std::string>, std::vector<double>> values_;
};

// min and max over repetitions, next to Google Benchmark's mean, median and
// stddev.
inline benchmark::internal::Benchmark* WithMinMax(benchmark::internal::Benchmark* b) {
  return b
      ->ComputeStatistics(
          "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); })
      ->ComputeStatistics("max", [](const std::vector<double>& v) {
        return *std::max_element(v.begin(), v.end());
      });
}

// Env that forwards everything but makes syncs free, for benchmarks whose
// store is scratch and whose figure is not the disk's sync.
class NoSyncFile final : public WritableFile {
 public:
  explicit NoSyncFile(std::unique_ptr<WritableFile> f) : f_(std::move(f)) {}
  Status Append(std::span<const std::string_view> pieces) override { return f_->Append(pieces); }
  Status WriteAt(uint64_t offset, std::string_view data) override {
    return f_->WriteAt(offset, data);
  }
  Status Sync() override { return Status::OK(); }
  Status SyncPrefix(uint64_t) override { return Status::OK(); }
  Status Close() override { return f_->Close(); }
  uint64_t Size() const override { return f_->Size(); }

 private:
  std::unique_ptr<WritableFile> f_;
};

class NoSyncEnv final : public EnvWrapper {
 public:
  explicit NoSyncEnv(Env* base) : EnvWrapper(base) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool exclusive) override {
    auto f = target()->NewWritableFile(path, exclusive);
    if (!f.ok()) return f.status();
    return std::unique_ptr<WritableFile>(new NoSyncFile(std::move(f).value()));
  }
  Status SyncDir(const std::string&) override { return Status::OK(); }
};

// main() of every Google Benchmark program here.
inline int BenchMain(int argc, char** argv) {
  // Before Initialize, which removes the flags it knows from argv.
  bool console = true;
  bool color = ::isatty(STDOUT_FILENO) != 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--benchmark_format=", 0) == 0 && a != "--benchmark_format=console")
      console = false;
    if (a == "--benchmark_color=false" || a == "--benchmark_color=no") color = false;
    if (a == "--benchmark_color=true" || a == "--benchmark_color=yes") color = true;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  AddMachineContext();
  if (console) {
    TargetReporter reporter(color ? benchmark::ConsoleReporter::OO_ColorTabular
                                  : benchmark::ConsoleReporter::OO_Tabular);
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace runstore::bench

#endif  // RUNSTORE_BENCH_BENCH_UTIL_H_
