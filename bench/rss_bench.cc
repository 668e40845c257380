// rss_bench: peak resident memory of a writer that writes far more than its
// buffer (docs/design.md#invariant-1).
//
// Target (performance issue, item 4): a writer with a 64 MiB buffer that
// writes 10 GiB of records peaks at no more than 96 MiB of RSS (the whole
// process: buffer, block builders, segment index, libraries).
//
// The records: many runs of 1024 steps; at every step 32 float64 scalar
// series, and every 64 steps two 64 KiB float64 arrays (below the 1 MiB
// large-value threshold, so they are copied into the buffer like scalars).
// By bytes that is ~27% scalar records (24 bytes each with run and step) and
// ~73% arrays. An explicit Commit every 256 MiB of records.
//
//   ./rss_bench [--gib N] [--codec none|lz4|zstd] [--dir DIR] [--keep]
//
// The store goes to a fresh directory under --dir, else $RUNSTORE_BENCH_DIR,
// else /var/tmp, and is deleted at the end (unless --keep). N GiB are written
// only when more than 2N GiB are free; otherwise N is scaled down, and the
// program says so.
#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

constexpr double kTargetMiB = 96;
constexpr size_t kBufferBytes = 64ull << 20;
constexpr uint64_t kCommitEvery = 256ull << 20;
constexpr int kScalarSeries = 32;
constexpr int kArraySeries = 2;
constexpr int64_t kArrayElems = 8192;  // 64 KiB of float64
constexpr int64_t kStepsPerRun = 1024;
constexpr int64_t kArrayEvery = 64;  // steps
constexpr size_t kArrayPool = 16;
constexpr uint64_t kSeed = 0x5eed'0004;

// A field of /proc/self/status in KiB ("VmHWM", "VmRSS"), or -1.
long ProcStatusKiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
  }
  return -1;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) n += it->file_size();
  }
  return n;
}

// Samples, every 5 ms, VmRSS and the bytes malloc has handed out and not
// had back (mallinfo2: uordblks + hblkhd), keeping the maxima. The gap
// between the two peaks is allocator overhead and fragmentation; the malloc
// peak minus the writer's peak_buffered_bytes is memory the writer's budget
// does not count.
class Sampler {
 public:
  Sampler() : thread_([this] { Loop(); }) {}
  ~Sampler() { Stop(); }
  void Stop() {
    if (!stop_.exchange(true)) thread_.join();
  }
  double peak_rss_mib() const { return peak_rss_kib_ / 1024.0; }
  double peak_malloc_mib() const { return static_cast<double>(peak_malloc_) / (1 << 20); }
  double peak_heap_mib() const { return static_cast<double>(peak_heap_) / (1 << 20); }

 private:
  void Loop() {
    while (!stop_.load()) {
      peak_rss_kib_ = std::max(peak_rss_kib_, ProcStatusKiB("VmRSS"));
      struct mallinfo2 mi = ::mallinfo2();
      peak_malloc_ = std::max(peak_malloc_, mi.uordblks + mi.hblkhd);
      peak_heap_ = std::max(peak_heap_, mi.arena + mi.hblkhd);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::atomic<bool> stop_{false};
  long peak_rss_kib_ = 0;
  size_t peak_malloc_ = 0;
  size_t peak_heap_ = 0;
  std::thread thread_;
};

int Usage() {
  std::fprintf(stderr, "usage: rss_bench [--gib N] [--codec none|lz4|zstd] [--dir DIR] [--keep]\n");
  return 2;
}

int Main(int argc, char** argv) {
  double gib = 10;
  Codec codec = Codec::kNone;
  std::string base = BenchBaseDir();
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--gib") {
      const char* v = next();
      if (!v) return Usage();
      gib = std::strtod(v, nullptr);
      if (!(gib > 0)) return Usage();
    } else if (a == "--codec") {
      const char* v = next();
      if (!v) return Usage();
      auto c = ParseCodec(v);
      if (!c.ok()) return Usage();
      codec = *c;
    } else if (a == "--dir") {
      const char* v = next();
      if (!v) return Usage();
      base = v;
    } else if (a == "--keep") {
      keep = true;
    } else {
      return Usage();
    }
  }
  ::setenv("RUNSTORE_BENCH_DIR", base.c_str(), 1);

  const double free_gib = static_cast<double>(FreeBytes(base)) / (1ull << 30);
  std::printf("machine: %s, nproc %ld, %s\n", CpuModel().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN),
              Kernel().c_str());
  std::printf("bench dir: %s (%s, %.1f GiB free)\n", base.c_str(), FsTypeName(base).c_str(),
              free_gib);
  if (FsTypeName(base) == "tmpfs") {
    std::printf("warning: %s is tmpfs: the data written counts against memory, not a disk\n",
                base.c_str());
  }
  if (free_gib <= 2 * gib) {
    const double scaled = std::max(0.25, std::floor(free_gib / 2 * 4) / 4 - 0.25);
    std::printf("NOTE: only %.1f GiB free, not more than 2 x %.2f GiB: scaling down to %.2f GiB\n",
                free_gib, gib, scaled);
    gib = scaled;
  }
  const uint64_t goal = static_cast<uint64_t>(gib * (1ull << 30));
  std::printf(
      "writing %.2f GiB of records (codec %s, buffer %zu MiB, commit every %llu MiB, seed %llu)\n",
      gib, std::string(CodecName(codec)).c_str(), kBufferBytes >> 20,
      static_cast<unsigned long long>(kCommitEvery >> 20), static_cast<unsigned long long>(kSeed));
  const long rss_start_kib = ProcStatusKiB("VmRSS");

  TempDir dir("runstore-rss");
  uint64_t records = 0, record_bytes = 0, disk_bytes = 0;
  WriterStats st;
  long max_sampled_rss = 0;
  double secs = 0;
  {
    auto store = CheckValue(Store::Open(dir.Sub("store"), {}), "Store::Open");
    WriterOptions wo;
    wo.buffer_bytes = kBufferBytes;
    wo.codec = codec;
    auto writer = CheckValue(store->NewWriter(wo), "NewWriter");

    std::vector<std::string> scalar_names, array_names;
    for (int k = 0; k < kScalarSeries; ++k) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "metric_%02d", k);
      scalar_names.push_back(buf);
    }
    for (int k = 0; k < kArraySeries; ++k) array_names.push_back("trace_" + std::to_string(k));
    const int64_t shape[1] = {kArrayElems};
    uint64_t s = kSeed;
    auto rnd = [&s] { return static_cast<double>(XorShift64(&s) >> 11) * 0x1.0p-53; };
    // 16 random arrays (1 MiB), cycled: as incompressible as real float data,
    // without generating 8192 values per append.
    std::vector<std::vector<double>> arrays(kArrayPool, std::vector<double>(kArrayElems));
    for (auto& a : arrays) {
      for (double& x : a) x = rnd();
    }
    uint64_t array_seq = 0;

    Sampler sampler;
    const auto start = std::chrono::steady_clock::now();
    uint64_t since_commit = 0;
    uint64_t next_report = 1ull << 30;
    for (int64_t run = 0; record_bytes < goal; ++run) {
      for (int64_t step = 0; step < kStepsPerRun && record_bytes < goal; ++step) {
        for (const auto& name : scalar_names) {
          Check(writer->Append(run, name, step, rnd()), "Append");
        }
        records += kScalarSeries;
        record_bytes += kScalarSeries * 24;
        since_commit += kScalarSeries * 24;
        if (step % kArrayEvery == 0) {
          for (const auto& name : array_names) {
            const double* a = arrays[array_seq++ % kArrayPool].data();
            Check(writer->Append(run, name, step, ValueRef::Array<double>(a, shape)), "Append");
          }
          records += kArraySeries;
          record_bytes += kArraySeries * (16 + kArrayElems * 8);
          since_commit += kArraySeries * (16 + kArrayElems * 8);
        }
        if (since_commit >= kCommitEvery) {
          Check(writer->Commit(), "Commit");
          since_commit = 0;
          max_sampled_rss = std::max(max_sampled_rss, ProcStatusKiB("VmRSS"));
        }
        if (record_bytes >= next_report) {
          const double t =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::printf("  %6.2f GiB  %8.1f s  VmRSS %6.1f MiB  VmHWM %6.1f MiB\n",
                      static_cast<double>(record_bytes) / (1ull << 30), t,
                      ProcStatusKiB("VmRSS") / 1024.0, ProcStatusKiB("VmHWM") / 1024.0);
          std::fflush(stdout);
          next_report += 1ull << 30;
        }
      }
    }
    Check(writer->Close(), "Close");
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    st = writer->stats();
    sampler.Stop();
    disk_bytes = DirBytes(dir.path());
    std::printf(
        "sampled every 5 ms: peak VmRSS %.1f MiB, peak malloc in use %.1f MiB, peak malloc "
        "heap+mmap %.1f MiB\n",
        sampler.peak_rss_mib(), sampler.peak_malloc_mib(), sampler.peak_heap_mib());
  }

  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  const double maxrss_mib =
      static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
  const double hwm_mib = ProcStatusKiB("VmHWM") / 1024.0;
  const double peak = std::max(maxrss_mib, hwm_mib);
  std::printf(
      "records %llu (%.2f GiB of run+step+value bytes) in %.1f s: %.2f M records/s, %.0f MiB/s\n",
      static_cast<unsigned long long>(records), static_cast<double>(record_bytes) / (1ull << 30),
      secs, static_cast<double>(records) / secs / 1e6,
      static_cast<double>(record_bytes) / secs / (1 << 20));
  std::printf(
      "segment files %.2f GiB; writer: %llu bytes written, %llu commits, %llu segments sealed, "
      "%llu back-pressure waits (%.1f s), peak buffered %.1f MiB\n",
      static_cast<double>(disk_bytes) / (1ull << 30),
      static_cast<unsigned long long>(st.bytes_written),
      static_cast<unsigned long long>(st.commits),
      static_cast<unsigned long long>(st.segments_sealed),
      static_cast<unsigned long long>(st.backpressure_waits), st.backpressure_seconds,
      static_cast<double>(st.peak_buffered_bytes) / (1 << 20));
  std::printf("RSS at start %.1f MiB; max VmRSS sampled at commits %.1f MiB\n",
              rss_start_kib / 1024.0, max_sampled_rss / 1024.0);
  std::printf("peak RSS: getrusage ru_maxrss %.1f MiB, /proc/self/status VmHWM %.1f MiB\n",
              maxrss_mib, hwm_mib);
  std::printf("%s: peak RSS %.1f MiB, target <= %.0f MiB (%.2fx of target)%s\n",
              peak <= kTargetMiB ? "PASS" : "MISS", peak, kTargetMiB, peak / kTargetMiB,
              gib < 10 ? " [scaled-down run]" : "");
  if (keep) {
    std::printf("kept the store in %s\n", dir.path().c_str());
    dir.Release();
  } else {
    dir.Remove();
    std::printf("removed %s\n", dir.path().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) { return runstore::bench::Main(argc, argv); }
