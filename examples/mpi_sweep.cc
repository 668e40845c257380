// A parameter sweep split over MPI ranks: each rank is a runstore writer.
//
//   mpirun -np 4 build/release/examples/mpi_sweep --store PATH [--experiments 400]
//   mpirun -np 4 build/release/examples/mpi_sweep --store PATH --bench 1000000 --commit-every 10000
//
// Experiment e (0 .. N-1) belongs to rank e % size. Every rank opens its own writer (id
// "rank<r>-<pid>": ranks share no file), reads which of its experiments are done (the store's
// "done" series, one record per finished experiment, committed together with its outcomes), and
// runs the rest, committing after each. No collective call is made to write or to commit: the one
// barrier only lets rank 0 create the store before the others open it, and the reduction at the
// end only prints a summary. A rank that dies (SIGKILL, an out-of-memory kill, mpirun aborting the
// job) loses nothing it committed, and running the same command again runs only what is missing.
//
// --kill-rank R --kill-after K makes rank R SIGKILL itself as it starts its (K+1)-th experiment,
// after K commits: the crash test (examples/mpi_sweep_test.sh). --log FILE appends one line per
// experiment run ("<experiment> <rank>"), so that the test can tell what ran twice.
//
// --bench N writes N records of one float64 per rank (run = rank, step = 0 .. N-1, a commit every
// --commit-every records, then a close) and rank 0 prints the aggregate rate, for the MPI
// benchmark of docs/performance.md; with --disk-check it first measures the disk's sequential
// write speed (writes of 1 MiB then fdatasync, the same bytes as the records' payload).
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runstore/store.h"

namespace {

struct Args {
  std::string store, log;
  long long experiments = 400, bench = 0, commit_every = 10000;
  int kill_rank = -1, kill_after = -1;
  bool disk_check = false;
};

[[noreturn]] void Die(int rank, const std::string& what, const runstore::Status& s) {
  std::fprintf(stderr, "mpi_sweep rank %d: %s: %s\n", rank, what.c_str(), s.ToString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--disk-check") {
      a->disk_check = true;
      continue;
    }
    if ((v = next()) == nullptr) return false;
    if (k == "--store") {
      a->store = v;
    } else if (k == "--log") {
      a->log = v;
    } else if (k == "--experiments") {
      a->experiments = std::atoll(v);
    } else if (k == "--bench") {
      a->bench = std::atoll(v);
    } else if (k == "--commit-every") {
      a->commit_every = std::atoll(v);
    } else if (k == "--kill-rank") {
      a->kill_rank = std::atoi(v);
    } else if (k == "--kill-after") {
      a->kill_after = std::atoi(v);
    } else {
      return false;
    }
  }
  return !a->store.empty() && a->experiments > 0 && a->commit_every > 0 && a->bench >= 0;
}

// A small stand-in for real work: a noisy 50-point curve and its mean.
std::vector<double> Simulate(long long e) {
  std::vector<double> curve(50);
  uint64_t s = static_cast<uint64_t>(e) * 0x9e3779b97f4a7c15ULL + 1;
  for (double& x : curve) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<double>(e) + static_cast<double>(s >> 11) * 0x1.0p-53 - 0.5;
  }
  return curve;
}

void AppendLine(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());  // one write: ranks append to one file
  ::close(fd);
}

int Sweep(const Args& a, int rank, int size, runstore::Store* store) {
  auto snap = store->GetSnapshot();
  runstore::WriterOptions wo;
  wo.writer_id = "rank" + std::to_string(rank) + "-" + std::to_string(::getpid());
  auto w = store->NewWriter(wo);
  if (!w.ok()) Die(rank, "writer", w.status());
  long long done_before = 0, ran = 0;
  const int64_t shape[] = {50};
  for (long long e = rank; e < a.experiments; e += size) {
    if (snap->Get(runstore::RunRef(static_cast<int64_t>(e)), "done", 0).ok()) {
      ++done_before;
      continue;
    }
    if (rank == a.kill_rank && ran == a.kill_after) ::kill(::getpid(), SIGKILL);
    if (!a.log.empty()) AppendLine(a.log, std::to_string(e) + " " + std::to_string(rank) + "\n");
    const std::vector<double> curve = Simulate(e);
    double mean = 0;
    for (double x : curve) mean += x / static_cast<double>(curve.size());
    const runstore::RunRef run(static_cast<int64_t>(e));
    runstore::Status s =
        (*w)->Append(run, "curve", 0, runstore::ValueRef::Array(curve.data(), shape));
    if (s.ok()) s = (*w)->Append(run, "mean", 0, runstore::ValueRef::Scalar(mean));
    const int32_t r = rank;
    if (s.ok()) s = (*w)->Append(run, "rank", 0, runstore::ValueRef::Scalar(r));
    const int8_t one = 1;
    if (s.ok()) s = (*w)->Append(run, "done", 0, runstore::ValueRef::Scalar(one));
    if (s.ok()) s = (*w)->Commit();  // outcomes and "done" durable together
    if (!s.ok()) Die(rank, "experiment " + std::to_string(e), s);
    ++ran;
  }
  if (runstore::Status s = (*w)->Close(); !s.ok()) Die(rank, "close", s);
  long long mine[2] = {ran, done_before}, all[2] = {0, 0};
  MPI_Reduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  std::printf("rank %d summary ran %lld already-done %lld\n", rank, ran, done_before);
  std::fflush(stdout);
  if (rank == 0) {
    std::printf("sweep: %lld experiments over %d ranks, %lld run now, %lld done before\n",
                a.experiments, size, all[0], all[1]);
  }
  return 0;
}

// Sequential write speed of the disk under `dir`: `bytes` in writes of 1 MiB, then fdatasync.
double DiskMBps(const std::string& dir, long long bytes) {
  const std::string path = dir + "/.mpi_sweep_disk_check";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 0;
  std::vector<char> buf(1 << 20, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  for (long long done = 0; done < bytes; done += static_cast<long long>(buf.size())) {
    if (::write(fd, buf.data(), buf.size()) < 0) break;
  }
  ::fdatasync(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  ::unlink(path.c_str());
  return static_cast<double>(bytes) / s / 1e6;
}

int Bench(const Args& a, int rank, int size, runstore::Store* store) {
  const long long payload = a.bench * size * static_cast<long long>(sizeof(double) + 16);
  if (a.disk_check && rank == 0) {
    std::printf("disk: %.0f MB/s sequential write + fdatasync (%lld MB)\n",
                DiskMBps(a.store, payload), payload / 1000000);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  runstore::WriterOptions wo;
  wo.writer_id = "bench" + std::to_string(rank) + "-" + std::to_string(::getpid());
  auto w = store->NewWriter(wo);
  if (!w.ok()) Die(rank, "writer", w.status());
  const auto t0 = std::chrono::steady_clock::now();
  const runstore::RunRef run(static_cast<int64_t>(rank));
  for (long long i = 0; i < a.bench; ++i) {
    const double v = static_cast<double>(i);
    runstore::Status s = (*w)->Append(run, "x", i, runstore::ValueRef::Scalar(v));
    if (s.ok() && (i + 1) % a.commit_every == 0) s = (*w)->Commit();
    if (!s.ok()) Die(rank, "append", s);
  }
  if (runstore::Status s = (*w)->Close(); !s.ok()) Die(rank, "close", s);
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double records = static_cast<double>(a.bench) * size;
    std::printf(
        "bench: %d ranks x %lld records (a commit every %lld): %.2f s, %.2f M records/s in all, "
        "%.2f M records/s a rank\n",
        size, a.bench, a.commit_every, slowest, records / slowest / 1e6,
        static_cast<double>(a.bench) / slowest / 1e6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "usage: mpi_sweep --store PATH [--experiments N] [--log FILE] "
                   "[--kill-rank R --kill-after K] | --store PATH --bench N [--commit-every C] "
                   "[--disk-check]\n");
    }
    MPI_Finalize();
    return 1;
  }
  // Rank 0 creates the store; the others open it once it exists (creating it at once from every
  // rank is safe too: Kill9Test.ManyProcessesCreatingOneStoreAtOnceAllSucceed).
  std::unique_ptr<runstore::Store> store;
  if (rank == 0) {
    auto s = runstore::Store::Open(a.store, {});
    if (!s.ok()) Die(rank, "open " + a.store, s.status());
    store = std::move(s).value();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) {
    auto s = runstore::Store::Open(a.store, {});
    if (!s.ok()) Die(rank, "open " + a.store, s.status());
    store = std::move(s).value();
  }
  const int rc =
      a.bench > 0 ? Bench(a, rank, size, store.get()) : Sweep(a, rank, size, store.get());
  MPI_Finalize();
  return rc;
}
