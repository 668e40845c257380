// staging_bench: node-local staging against direct writing
// (docs/design.md#staging, docs/performance.md "Staging").
//
//   staging_bench [--writers 32] [--records 200000] [--commit-every 1000]
//                 [--segment-bytes 1048576] [--rounds 3] [--dir DIR] [--store DIR]
//
// Runs --writers writer processes at once, each appending --records scalar
// records (int run, "loss", step, float64) and committing every
// --commit-every records, then closing: once writing straight into the store,
// once with staging_dir on the local disk (each sealed segment shipped into
// the store by the writer's shipping thread; close ships the last). Two
// times, from the moment every process has opened the store: until the last
// writer's last commit is durable (what the computation waits for), and
// until the last one has closed, which for staging includes shipping
// everything; the target applies to the second. The
// two alternate (which goes first alternates too), --rounds times each, in
// the same run, so that each round is a pair measured under the same load; printed: each round's
// records per second, the median of the rounds' staged/direct ratios (target: staging >= 90% of
// direct; the median of pairs, since a shared machine's load drifts more between rounds than within
// one), the best of each, and the files left in staging (must be none). --store puts the store
// elsewhere (a shared file system) while staging stays under --dir. A plain program: it prints
// figures and a PASS/FAIL line, and exits 0 unless a writer failed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "runstore/store.h"

namespace {

using runstore::bench::BenchBaseDir;
using runstore::bench::RemoveAll;

struct Config {
  int writers = 32;
  int64_t records = 200000;
  int64_t commit_every = 1000;
  uint64_t segment_bytes = 1u << 20;
  int rounds = 3;
  std::string dir = BenchBaseDir();
  std::string store;  // empty: under dir
};

// One writer process: opens, signals ready, waits for `go`, writes, closes.
[[noreturn]] void WriterMain(const Config& c, const std::string& store_path,
                             const std::string& staging, int index, int ready_fd, int go_fd) {
  auto store = runstore::Store::Open(store_path, {});
  if (!store.ok()) {
    std::fprintf(stderr, "writer %d: %s\n", index, store.status().ToString().c_str());
    ::_exit(2);
  }
  runstore::WriterOptions o;
  o.writer_id = "b" + std::to_string(index);
  o.segment_bytes = c.segment_bytes;
  o.staging_dir = staging;  // "" for direct
  o.buffer_bytes = 8u << 20;
  auto w = (*store)->NewWriter(o);
  if (!w.ok()) {
    std::fprintf(stderr, "writer %d: %s\n", index, w.status().ToString().c_str());
    ::_exit(2);
  }
  char b = 1;
  if (::write(ready_fd, &b, 1) != 1 || ::read(go_fd, &b, 1) != 1) ::_exit(3);
  runstore::Status s;
  for (int64_t i = 0; i < c.records && s.ok(); ++i) {
    s = (*w)->Append(static_cast<int64_t>(index) * 1000000 + i / 1000, "loss", i, 0.001 * i);
    if (s.ok() && (i + 1) % c.commit_every == 0) s = (*w)->Commit();
  }
  if (s.ok()) s = (*w)->Commit();
  // When the last commit was durable (in staging, or in the store): one
  // monotonic clock for every process of the machine.
  const int64_t committed = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count();
  if (::write(ready_fd, &committed, sizeof committed) != sizeof committed) ::_exit(3);
  if (s.ok()) s = (*w)->Close();
  if (!s.ok()) {
    std::fprintf(stderr, "writer %d: %s\n", index, s.ToString().c_str());
    ::_exit(1);
  }
  ::_exit(0);
}

// Seconds for every writer to write and close; -1 if one failed. *commit_secs:
// until the last writer's last commit was durable (before its close ships).
double RunOnce(const Config& c, const std::string& store_path, const std::string& staging,
               double* commit_secs) {
  int ready[2], go[2];
  if (::pipe(ready) != 0 || ::pipe(go) != 0) return -1;
  std::vector<pid_t> pids;
  for (int i = 0; i < c.writers; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      WriterMain(c, store_path, staging, i, ready[1], go[0]);
    }
    if (pid < 0) return -1;
    pids.push_back(pid);
  }
  ::close(ready[1]);
  ::close(go[0]);
  char b;
  for (int i = 0; i < c.writers; ++i) {
    if (::read(ready[0], &b, 1) != 1) return -1;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string all(static_cast<size_t>(c.writers), 'g');
  if (::write(go[1], all.data(), all.size()) != static_cast<ssize_t>(all.size())) return -1;
  int64_t last_commit = 0;
  for (int i = 0; i < c.writers; ++i) {
    int64_t t = 0;
    if (::read(ready[0], &t, sizeof t) != sizeof t) break;  // a writer failed
    last_commit = std::max(last_commit, t);
  }
  *commit_secs =
      std::chrono::duration<double>(
          std::chrono::steady_clock::time_point(std::chrono::nanoseconds(last_commit)) - start)
          .count();
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(ready[0]);
  ::close(go[1]);
  return ok ? secs : -1;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--writers")
      c.writers = std::atoi(v.c_str());
    else if (a == "--records")
      c.records = std::atoll(v.c_str());
    else if (a == "--commit-every")
      c.commit_every = std::atoll(v.c_str());
    else if (a == "--segment-bytes")
      c.segment_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--rounds")
      c.rounds = std::atoi(v.c_str());
    else if (a == "--dir")
      c.dir = v;
    else if (a == "--store")
      c.store = v;
    else {
      std::fprintf(stderr, "staging_bench: unknown option %s\n", a.c_str());
      return 1;
    }
  }
  if ((argc - 1) % 2 != 0 || c.writers < 1 || c.records < 1 || c.commit_every < 1) {
    std::fprintf(stderr,
                 "usage: staging_bench [--writers N] [--records N] [--commit-every N] "
                 "[--segment-bytes N] [--rounds N] [--dir DIR] [--store DIR]\n");
    return 1;
  }
  const std::string root = c.dir + "/staging_bench." + std::to_string(::getpid());
  const std::string store_root =
      c.store.empty() ? root : c.store + "/staging_bench." + std::to_string(::getpid());
  std::filesystem::create_directories(root);
  std::filesystem::create_directories(store_root);
  std::printf(
      "staging_bench: %d writer processes x %lld records, a commit every %lld, segments "
      "of %llu bytes; staging in %s (%s), store in %s (%s)\n",
      c.writers, static_cast<long long>(c.records), static_cast<long long>(c.commit_every),
      static_cast<unsigned long long>(c.segment_bytes), root.c_str(),
      runstore::bench::FsTypeName(root).c_str(), store_root.c_str(),
      runstore::bench::FsTypeName(store_root).c_str());
  double best_direct = 0, best_staged = 0;
  std::vector<double> ratios, commit_ratios;  // staged / direct, per round
  size_t left_in_staging = 0;
  bool failed = false;
  for (int r = 0; r < c.rounds && !failed; ++r) {
    // Which goes first alternates, so that neither always runs while the
    // file system is still busy with the one before (write-back, removals).
    double rates[2] = {0, 0}, commit_rates[2] = {0, 0};  // direct, staged
    for (const bool staged : {r % 2 == 1, r % 2 == 0}) {
      const std::string tag = (staged ? "staged" : "direct") + std::to_string(r);
      const std::string store_path = store_root + "/" + tag;
      const std::string staging = staged ? root + "/local_" + tag : "";
      double commit_secs = 0;
      const double secs = RunOnce(c, store_path, staging, &commit_secs);
      if (secs < 0) {
        std::printf("  round %d %s: a writer failed\n", r, staged ? "staged" : "direct");
        failed = true;
        break;
      }
      const double n = static_cast<double>(c.writers) * static_cast<double>(c.records);
      const double rate = n / secs, commit_rate = n / commit_secs;
      std::printf(
          "  round %d %-6s committed in %5.2f s (%10.0f records/s), closed%s in %5.2f s "
          "(%10.0f records/s)\n",
          r, staged ? "staged" : "direct", commit_secs, commit_rate, staged ? " and shipped" : "",
          secs, rate);
      double& best = staged ? best_staged : best_direct;
      if (rate > best) best = rate;
      rates[staged] = rate;
      commit_rates[staged] = commit_rate;
      if (staged) {
        for (const auto& e : std::filesystem::directory_iterator(staging)) {
          (void)e;
          ++left_in_staging;
        }
      }
      RemoveAll(store_path);
      if (staged) RemoveAll(staging);
    }
    if (!failed) {
      ratios.push_back(rates[1] / rates[0]);
      commit_ratios.push_back(commit_rates[1] / commit_rates[0]);
    }
  }
  RemoveAll(root);
  if (!c.store.empty()) RemoveAll(store_root);
  if (failed) return 1;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t k = v.size();
    return k == 0 ? 0.0 : k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
  };
  const double ratio = median(ratios), commit_ratio = median(commit_ratios);
  std::printf("best of %d, closed: direct %.0f records/s, staged %.0f records/s\n", c.rounds,
              best_direct, best_staged);
  std::printf(
      "staged/direct, median of %zu rounds: %.1f%% to the last close (everything "
      "shipped), %.1f%% to the last commit; files left in staging: %zu\n",
      ratios.size(), 100 * ratio, 100 * commit_ratio, left_in_staging);
  std::printf("%s: staging >= 90%% of direct to the last close, nothing left in staging\n",
              ratio >= 0.9 && left_in_staging == 0 ? "PASS" : "FAIL");
  return 0;
}
