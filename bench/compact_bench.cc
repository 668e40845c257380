// compact_bench: Store::Compact of many small segments (docs/performance.md
// "Compaction"). Writes a store of --segments sealed segments holding
// --total-mib in all (default 10,000 and 1024: 1 GiB), measures the disk's
// sequential write speed in the same directory (a file of the same size
// written and fsynced), then compacts the store in a fresh process (so that
// its peak RSS, /proc/self/status VmHWM, is the compaction's alone) and prints the
// throughput against the disk's, with the targets: >= 50% of the disk's
// speed, peak RSS <= --memory-mib + 32 MiB.
//
//   build/dev/bench/compact_bench [--total-mib 1024] [--segments 10000] [--memory-mib 256]
//
// The store goes under $RUNSTORE_BENCH_DIR (default /var/tmp) and is removed.
// To profile the compaction alone, write the store once and compact copies:
//
//   build/dev/bench/compact_bench --write-only /var/tmp/s
//   cp -a /var/tmp/s /var/tmp/c
//   perf record -g build/dev/bench/compact_bench --compact-only /var/tmp/c
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Writers of a sweep: each takes its own runs, a record of 1 KiB (128
// float64) and a scalar per (run, step), committing every segment's worth.
void WriteStore(const std::string& path, uint64_t total_bytes, uint64_t segments) {
  auto store = CheckValue(Store::Open(path, {}), "open store");
  constexpr int kWriters = 16;
  const uint64_t per_segment = std::max<uint64_t>(total_bytes / segments, 1);
  const uint64_t records_per_segment = std::max<uint64_t>(per_segment / 1040, 1);
  const uint64_t segments_per_writer = (segments + kWriters - 1) / kWriters;
  std::vector<double> v(128);
  const int64_t shape[1] = {128};
  for (int w = 0; w < kWriters; ++w) {
    WriterOptions o;
    o.writer_id = "sweep" + std::to_string(w);
    o.buffer_bytes = 8 << 20;
    o.segment_bytes = 1 << 16;  // rolls at every commit past 64 KiB
    auto writer = CheckValue(store->NewWriter(o), "new writer");
    uint64_t run = static_cast<uint64_t>(w) << 32;
    for (uint64_t s = 0; s < segments_per_writer && w * segments_per_writer + s < segments; ++s) {
      for (uint64_t r = 0; r < records_per_segment; ++r) {
        const int64_t step = static_cast<int64_t>(r % 10);
        if (step == 0) ++run;
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(run + i + step);
        const double loss = 1.0 / static_cast<double>(run + step + 1);
        Check(writer->Append(static_cast<int64_t>(run), "trace", step,
                             ValueRef::Array(v.data(), shape)),
              "append");
        Check(writer->Append(static_cast<int64_t>(run), "loss", step, loss), "append");
      }
      Check(writer->Commit(), "commit");
    }
    Check(writer->Close(), "close");
  }
}

double DiskWriteMBps(const std::string& dir, uint64_t bytes) {
  const std::string path = dir + "/seqwrite.tmp";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::abort();
  std::vector<char> buf(1 << 20, 'x');
  const double t0 = Now();
  for (uint64_t done = 0; done < bytes; done += buf.size()) {
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) std::abort();
  }
  ::fsync(fd);
  const double t = Now() - t0;
  ::close(fd);
  ::unlink(path.c_str());
  return static_cast<double>(bytes) / 1e6 / t;
}

// VmHWM of this process image, in KiB (0 if unreadable): exec resets it.
long PeakRssKib() {
  long hwm_kib = 0;
  std::ifstream st("/proc/self/status");
  for (std::string l; std::getline(st, l);) {
    if (l.rfind("VmHWM:", 0) == 0) hwm_kib = std::strtol(l.c_str() + 6, nullptr, 10);
  }
  return hwm_kib;
}

int CompactOnly(const std::string& path, uint64_t memory) {
  auto store = CheckValue(Store::Open(path, {}), "open store");
  const long open_kib = PeakRssKib();  // the opened store, before the merge
  CompactOptions o;
  o.memory_bytes = memory;
  CompactReport r;
  const double t0 = Now();
  Check(store->Compact(o, &r), "compact");
  const double t = Now() - t0;
  // The peak resident set of this process image: VmHWM, which exec resets.
  // (getrusage's ru_maxrss keeps, across exec, the resident set the forked
  // child had from the parent that wrote the store.)
  const long hwm_kib = PeakRssKib();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  ru.ru_maxrss = hwm_kib > 0 ? hwm_kib : ru.ru_maxrss;
  std::printf("%zu %llu %zu %llu %llu %.3f %ld %ld\n", r.inputs.size(),
              static_cast<unsigned long long>(r.input_bytes), r.outputs.size(),
              static_cast<unsigned long long>(r.output_bytes),
              static_cast<unsigned long long>(r.output_records), t, ru.ru_maxrss, open_kib);
  return 0;
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) {
  using namespace runstore::bench;
  uint64_t total_mib = 1024, segments = 10000, memory_mib = 256;
  std::string compact_only, write_only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--total-mib")
      total_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--segments")
      segments = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--memory-mib")
      memory_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--compact-only")
      compact_only = argv[i + 1];
    else if (a == "--write-only")
      write_only = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: compact_bench [--total-mib N] [--segments N] [--memory-mib N] "
                   "[--write-only STORE | --compact-only STORE]\n");
      return 1;
    }
  }
  if (!compact_only.empty()) return CompactOnly(compact_only, memory_mib << 20);
  if (!write_only.empty()) {
    WriteStore(write_only, total_mib << 20, segments);
    return 0;
  }
  char tmpl[4096];
  std::snprintf(tmpl, sizeof(tmpl), "%s/compact_bench.XXXXXX", BenchBaseDir().c_str());
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  const std::string store = dir + "/store";
  std::printf("compact_bench: %llu MiB in %llu segments, memory %llu MiB, in %s (%s)\n",
              static_cast<unsigned long long>(total_mib), static_cast<unsigned long long>(segments),
              static_cast<unsigned long long>(memory_mib), dir.c_str(), FsTypeName(dir).c_str());
  double t0 = Now();
  WriteStore(store, total_mib << 20, segments);
  std::printf("  store written in %.1f s\n", Now() - t0);
  const double disk = DiskWriteMBps(dir, total_mib << 20);
  std::printf("  disk: sequential write + fsync of %llu MiB: %.0f MB/s\n",
              static_cast<unsigned long long>(total_mib), disk);
  // The compaction in a process of its own: its peak RSS is its own.
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    const std::string mem = std::to_string(memory_mib);
    execl("/proc/self/exe", argv[0], "--compact-only", store.c_str(), "--memory-mib", mem.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipefd[1]);
  char line[512] = {};
  FILE* f = fdopen(pipefd[0], "r");
  const bool got = f && std::fgets(line, sizeof(line), f) != nullptr;
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "compaction failed\n");
    return 1;
  }
  size_t inputs = 0, outputs = 0;
  unsigned long long in_bytes = 0, out_bytes = 0, records = 0;
  double secs = 0;
  long rss_kib = 0, open_kib = 0;
  std::sscanf(line, "%zu %llu %zu %llu %llu %lf %ld %ld", &inputs, &in_bytes, &outputs, &out_bytes,
              &records, &secs, &rss_kib, &open_kib);
  const double mbps = static_cast<double>(in_bytes) / 1e6 / secs;
  const double rss_mib = static_cast<double>(rss_kib) / 1024.0;
  std::printf("  compacted %zu segments (%.1f MiB) into %zu (%.1f MiB), %llu records, in %.2f s\n",
              inputs, static_cast<double>(in_bytes) / 1048576.0, outputs,
              static_cast<double>(out_bytes) / 1048576.0, records, secs);
  std::printf(
      "  throughput %.0f MB/s = %.0f%% of the disk's sequential write (target >= 50%%): %s\n", mbps,
      100 * mbps / disk, mbps >= 0.5 * disk ? "PASS" : "MISS");
  std::printf("  peak RSS of the compaction %.1f MiB (target <= %llu + 32 MiB): %s\n", rss_mib,
              static_cast<unsigned long long>(memory_mib),
              rss_mib <= static_cast<double>(memory_mib) + 32 ? "PASS" : "MISS");
  std::printf("  of which the opened store before the merge: %.1f MiB\n",
              static_cast<double>(open_kib) / 1024.0);
  return 0;
}
