// A writer process for tests/kill9_test.cc, which SIGKILLs it at random.
//
//   kill9_writer <store> <index> <life> [<seconds> [<start at>]]
//
// Opens the store, creates writer "w<index>-<life>" (or $KILL9_WRITER_ID,
// which lives of one index may share: a restart that reuses its id, or two
// lives alive at once with one id) and appends the records
// of kill9_pattern.h for (index, life, seq = 0, 1, ...), committing (or
// flushing) where the pattern says. After every Commit() or Flush() that
// returns OK it writes one line to stdout, in one write(2):
//
//   ACK <commit number> <first seq> <last seq>
//
// so that the supervisor knows exactly which records are acknowledged. With
// $KILL9_RESUME_AT set to a step c, the life writes every record into the
// index's resuming run (kill9_pattern.h), from seq = c on, and, for a life
// after the first, begins with Resume(run, c), then writes "RESUMED <c>".
// Runs
// until killed (or for <seconds>, then closes; 0: until killed). With <start
// at> (nanoseconds since the Unix epoch) it waits until then before opening
// the store, so that several processes open (and create) it at once. Any
// error: a message on stderr and exit status 2.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "kill9_pattern.h"
#include "runstore/store.h"

namespace {

[[noreturn]] void Die(const std::string& who, const runstore::Status& s) {
  std::fprintf(stderr, "kill9_writer %s: %s\n", who.c_str(), s.ToString().c_str());
  std::exit(2);
}

void WriteLine(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(1, line.data() + done, line.size() - done);
    if (n < 0) std::exit(3);  // the supervisor is gone
    done += static_cast<size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: kill9_writer <store> <index> <life> [<seconds> [<start at>]]\n");
    return 1;
  }
  const std::string path = argv[1];
  const int index = std::atoi(argv[2]);
  const int life = std::atoi(argv[3]);
  const double seconds = argc > 4 ? std::atof(argv[4]) : 0;
  if (argc > 5) {
    const std::chrono::system_clock::time_point at{std::chrono::nanoseconds(std::atoll(argv[5]))};
    std::this_thread::sleep_until(at);
  }
  const char* shared_id = std::getenv("KILL9_WRITER_ID");
  const std::string id =
      shared_id ? shared_id : "w" + std::to_string(index) + "-" + std::to_string(life);

  auto store = runstore::Store::Open(path, {});
  if (!store.ok()) Die(id, store.status());
  runstore::WriterOptions wo;
  wo.writer_id = id;
  wo.buffer_bytes = 8 << 20;
  wo.block_bytes = 64 << 10;         // several blocks in the larger commits
  wo.large_value_bytes = 128 << 10;  // the 256 KiB arrays are large values
  wo.segment_bytes = 1 << 20;        // segments roll often: kills land in rolls too
  auto writer = (*store)->NewWriter(wo);
  if (!writer.ok()) Die(id, writer.status());
  runstore::Writer& w = **writer;
  WriteLine("OPEN\n");

  const char* resume_at = std::getenv("KILL9_RESUME_AT");
  const bool resuming = resume_at != nullptr && *resume_at != '\0';
  const int64_t first_seq = resuming ? std::atoll(resume_at) : 0;
  const int64_t run = resuming ? kill9::ResumingRun(index) : kill9::IntRun(index, life);
  const std::string text_run = kill9::StringRun(index, life);  // outlives srun's view
  const runstore::RunRef srun = resuming ? runstore::RunRef(run) : runstore::RunRef(text_run);
  if (resuming && life > 0) {
    const runstore::Status s = w.Resume(run, first_seq);
    if (!s.ok()) Die(id, s);
    WriteLine("RESUMED " + std::to_string(first_seq) + "\n");
  }
  const int64_t vec_shape[] = {kill9::kVectorLength};
  const int64_t big_shape[] = {kill9::kBigLength};
  const auto start = std::chrono::steady_clock::now();
  uint64_t commits = 0;
  int64_t first_uncommitted = first_seq;
  for (int64_t seq = first_seq;; ++seq) {
    const kill9::Kind kind = kill9::KindOf(index, life, seq);
    const std::string bytes = kill9::ValueBytes(kind, index, life, seq);
    runstore::Status s;
    switch (kind) {
      case kill9::Kind::kScalar: {
        double d;
        std::memcpy(&d, bytes.data(), sizeof d);
        s = w.Append(run, "scalar", seq, d);
        break;
      }
      case kill9::Kind::kVector:
        s = w.Append(
            run, "vector", seq,
            runstore::ValueRef::Array(reinterpret_cast<const float*>(bytes.data()), vec_shape));
        break;
      case kill9::Kind::kText:
        s = w.Append(srun, "text", seq, runstore::ValueRef::String(bytes));
        break;
      case kill9::Kind::kBig:
        s = w.Append(
            run, "big", seq,
            runstore::ValueRef::Array(reinterpret_cast<const double*>(bytes.data()), big_shape));
        break;
    }
    if (!s.ok()) Die(id, s);
    if (!kill9::CommitsAfter(index, life, seq)) continue;
    s = kill9::FlushesInstead(index, life, seq) ? w.Flush() : w.Commit();
    if (!s.ok()) Die(id, s);
    ++commits;
    WriteLine("ACK " + std::to_string(commits) + " " + std::to_string(first_uncommitted) + " " +
              std::to_string(seq) + "\n");
    first_uncommitted = seq + 1;
    // A little pause keeps the data volume modest; the kills land anywhere.
    std::this_thread::sleep_for(std::chrono::microseconds(kill9::Mix3(index, life, ~seq) % 1000));
    if (seconds > 0 &&
        std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds)) {
      s = w.Close();
      if (!s.ok()) Die(id, s);
      return 0;
    }
  }
}
