// Real processes, kill -9 (docs/design.md#invariant-2; STYLE.md "Tests that try to
// break it"). A supervisor runs several kill9_writer processes on one store,
// SIGKILLs a random one at a random moment, round after round, and starts it
// again as a new life. Each writer reports "ACK <n> <first seq> <last seq>"
// after every Commit() or Flush() that returned OK (about half are flushes: a
// kill leaves the page cache, so a flush must survive it as a commit does). In
// the end every writer is killed and the store is read back: every acknowledged
// record must be there byte for byte, no key twice, nothing the writers would
// not have written, and for each writer life the records present must be whole
// commits, in order, with at most one commit beyond the last acknowledged one
// (committed, but killed before its ACK was written).
//
// The cluster test adds what a cluster job runs beside its writers: half of
// the writers stage on node-local disk ($RUNSTORE_STAGING_DIR) and ship
// sealed segments into the store, a `runstore compact` and a `runstore sync`
// run in loops, and the supervisor SIGKILLs any of them at random. At the end
// a forced sync ships what the dead writers left and a compaction merges and
// cleans up; then the same read-back holds, nothing is left in staging and
// the store holds only segments.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "programs/kill9_pattern.h"
#include "runstore/store.h"
#include "runstore/sync.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using Clock = std::chrono::steady_clock;
using ::runstore::testing::TempDir;
using ::runstore::testing::TestSeed;

constexpr int kWriters = 6;
constexpr int kRounds = 100;               // at least 50 kills
constexpr int kMaxSleepMs = 100;           // between kills
constexpr double kWallBudgetSeconds = 45;  // stop killing early past this
constexpr int kReaders = 2;

// $RUNSTORE_SOAK_SECONDS (the writers-only test) and
// $RUNSTORE_CLUSTER_SOAK_SECONDS (the cluster test) turn a test into a soak
// (scripts/soak.sh): it kills and restarts for that long instead of kRounds
// times.
double SoakSeconds(const char* variable) {
  const char* env = std::getenv(variable);
  return env ? std::atof(env) : 0;
}

std::string HelperPath(const char* name) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return name;
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + name;
}

// What one life of one writer acknowledged.
struct Life {
  int index = 0;
  int life = 0;
  bool opened = false;
  uint64_t commits = 0;   // ACK lines
  int64_t acked_end = 0;  // seqs [0, acked_end) are acknowledged ([resume_at, ...) resuming)
  // A resuming life (kill9_pattern.h): the step it resumed its run at (-1:
  // not a resuming life), whether its Resume was acknowledged (its first
  // life resumes nothing and counts as resumed), and the ends of its
  // acknowledged commits, from resume_at on: where a later life may resume.
  int64_t resume_at = -1;
  bool resumed = false;
  std::vector<int64_t> boundaries;
  std::string problems;  // malformed or inconsistent ACK lines
};

struct Child {
  pid_t pid = -1;
  int fd = -1;
  int index = 0;
  int life = 0;
  std::string buf;
};

class Supervisor {
 public:
  Supervisor(std::string store, std::string program)
      : store_(std::move(store)), program_(std::move(program)) {}
  // No writer outlives the test, even one that stops at a failed ASSERT.
  ~Supervisor() { KillAll(); }

  // Starts writer `index` as life `life`; `extra` are further arguments.
  // With `writer_id`, the life writes under that id (KILL9_WRITER_ID) instead
  // of one of its own; with `staging`, it stages there (RUNSTORE_STAGING_DIR).
  // With `resume_at` >= 0, a resuming life (KILL9_RESUME_AT).
  void Spawn(int index, int life, const std::vector<std::string>& extra = {},
             const std::string& writer_id = "", const std::string& staging = "",
             int64_t resume_at = -1) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0) << std::strerror(errno);
    std::vector<std::string> args{program_, store_, std::to_string(index), std::to_string(life)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The environment is built before fork: the child of a process with
    // threads (the readers) may call nothing that allocates.
    std::string id_var = "KILL9_WRITER_ID=" + writer_id;
    std::string staging_var = "RUNSTORE_STAGING_DIR=" + staging;
    std::string resume_var = "KILL9_RESUME_AT=" + std::to_string(resume_at);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "KILL9_WRITER_ID=", 16) != 0 &&
          std::strncmp(*e, "RUNSTORE_STAGING_DIR=", 21) != 0 &&
          std::strncmp(*e, "KILL9_RESUME_AT=", 16) != 0) {
        envp.push_back(*e);
      }
    }
    if (!writer_id.empty()) envp.push_back(id_var.data());
    if (!staging.empty()) envp.push_back(staging_var.data());
    if (resume_at >= 0) envp.push_back(resume_var.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      ::dup2(fds[1], 1);  // dup2 clears FD_CLOEXEC on the copy
      ::execve(program_.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    Child c;
    c.pid = pid;
    c.fd = fds[0];
    c.index = index;
    c.life = life;
    children_[{index, life}] = std::move(c);
    Life& l = lives_[{index, life}];
    l.index = index;
    l.life = life;
    if (resume_at >= 0) {
      l.resume_at = l.acked_end = resume_at;
      l.resumed = life == 0;
      l.boundaries = {resume_at};
    }
  }

  // Reads what the writers have written, for up to `ms` milliseconds.
  void Pump(int ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (true) {
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
      std::vector<pollfd> pfds;
      std::vector<std::pair<int, int>> owners;
      for (auto& [key, c] : children_) {
        if (c.fd >= 0) {
          pfds.push_back(pollfd{c.fd, POLLIN, 0});
          owners.push_back(key);
        }
      }
      const int r = ::poll(pfds.data(), pfds.size(), std::max(left, 0));
      if (r > 0) {
        for (size_t i = 0; i < pfds.size(); ++i) {
          if (pfds[i].revents & (POLLIN | POLLHUP)) ReadSome(children_[owners[i]]);
        }
      }
      CheckForUnexpectedExits();
      if (left <= 0) break;
    }
  }

  // SIGKILLs life `life` of writer `index` (unless it already died, which
  // CheckForUnexpectedExits reported), reaps it and reads every line it wrote.
  void Kill(int index, int life) {
    Child& c = children_[{index, life}];
    // Only ever signal a child of ours: kill(-1, ...) would signal every
    // process we may signal, and kill(0, ...) our own process group.
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      int status = 0;
      if (::waitpid(c.pid, &status, 0) == c.pid &&
          !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        Unexpected(c, status);
      }
      c.pid = -1;
      ++kills_;
    }
    while (c.fd >= 0) ReadSome(c);  // to end of file: the pipe has no other writer
  }

  // Waits for life `life` of writer `index` to exit by itself; returns its
  // wait status.
  int Reap(int index, int life) {
    Child& c = children_[{index, life}];
    int status = 0;
    if (c.pid > 0) ::waitpid(c.pid, &status, 0);
    c.pid = -1;
    while (c.fd >= 0) ReadSome(c);
    return status;
  }

  void KillAll() {
    for (auto& [key, c] : children_) {
      if (c.pid > 0) Kill(key.first, key.second);
    }
  }

  const std::map<std::pair<int, int>, Life>& lives() const { return lives_; }
  int kills() const { return kills_; }
  const std::string& failures() const { return failures_; }

 private:
  void ReadSome(Child& c) {
    char buf[4096];
    const ssize_t n = ::read(c.fd, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) return;
      ::close(c.fd);
      c.fd = -1;
      return;
    }
    c.buf.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = c.buf.find('\n')) != std::string::npos) {
      Line(lives_[{c.index, c.life}], c.buf.substr(0, nl));
      c.buf.erase(0, nl + 1);
    }
  }

  // Checks an ACK line against the pattern: commits are numbered 1, 2, ...,
  // cover consecutive seqs, and end exactly where the pattern commits.
  static void Line(Life& l, const std::string& line) {
    if (line == "OPEN") {
      l.opened = true;
      return;
    }
    if (line.starts_with("RESUMED ")) {
      if (l.resume_at < 0 || l.resumed || line != "RESUMED " + std::to_string(l.resume_at)) {
        l.problems += "unexpected '" + line + "'; ";
      }
      l.resumed = true;
      return;
    }
    std::istringstream in(line);
    std::string word;
    uint64_t n = 0;
    int64_t first = -1, last = -1;
    in >> word >> n >> first >> last;
    if (word != "ACK" || in.fail()) {
      l.problems += "malformed line '" + line + "'; ";
      return;
    }
    bool ok = n == l.commits + 1 && first == l.acked_end && last >= first &&
              kill9::CommitsAfter(l.index, l.life, last);
    for (int64_t s = first; ok && s < last; ++s) ok = !kill9::CommitsAfter(l.index, l.life, s);
    if (l.resume_at >= 0 && !l.resumed) ok = false;  // records before the Resume
    if (!ok) l.problems += "ACK '" + line + "' does not follow the pattern; ";
    l.commits = n;
    l.acked_end = last + 1;
    if (l.resume_at >= 0) l.boundaries.push_back(l.acked_end);
  }

  void CheckForUnexpectedExits() {
    for (auto& [key, c] : children_) {
      if (c.pid <= 0) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
        Unexpected(c, status);
        c.pid = -1;
        while (c.fd >= 0) ReadSome(c);
      }
    }
  }

  void Unexpected(const Child& c, int status) {
    failures_ += "writer w" + std::to_string(c.index) + "-" + std::to_string(c.life) + " " +
                 (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                    : "died of signal " + std::to_string(WTERMSIG(status))) +
                 " (its stderr is above); ";
  }

  const std::string store_;
  const std::string program_;
  std::map<std::pair<int, int>, Child> children_;  // by (index, life)
  std::map<std::pair<int, int>, Life> lives_;
  int kills_ = 0;
  std::string failures_;
};

// Readers that refresh while the writers run and die: in every snapshot each
// writer life shows a prefix of its records made of whole commits, never
// shorter than in the snapshot before, with every value right.
class Readers {
 public:
  Readers(std::string path, int n) : path_(std::move(path)) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Readers() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  uint64_t refreshes() const { return refreshes_; }
  uint64_t records() const { return records_; }
  std::string failures() {
    std::lock_guard lk(mu_);
    return failures_;
  }

 private:
  void Fail(const std::string& why) {
    std::lock_guard lk(mu_);
    if (failures_.size() < 2000) failures_ += why + "; ";
  }
  void Loop() {
    auto store = Store::Open(path_, {.read_only = true});
    if (!store.ok()) return Fail("reader open: " + store.status().ToString());
    std::map<std::pair<int, int>, int64_t> last;  // life -> records seen last time
    while (!stop_) {
      auto snap = (*store)->Refresh();
      if (!snap.ok()) return Fail("reader refresh: " + snap.status().ToString());
      auto series = (*snap)->ListSeries();
      if (!series.ok()) return Fail("reader list: " + series.status().ToString());
      std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> seen;  // count, max seq
      for (const SeriesInfo& info : *series) {
        auto kind = kill9::KindOfName(info.name);
        auto scanner = (*snap)->Scan(info.name);
        if (!kind || !scanner.ok()) return Fail("reader scan of " + info.name);
        ScanBatch b;
        while (true) {
          auto more = (*scanner)->Next(&b);
          if (!more.ok()) return Fail("reader scan: " + more.status().ToString());
          if (!*more) break;
          for (size_t i = 0; i < b.count; ++i) {
            int index = -1, life = -1;
            const RunId run = b.run(i);
            // A resuming run holds several lives, which only the read-back's
            // model of resumes tells apart.
            if (run.is_int() && kill9::ParseResumingRun(run.int_value(), &index)) {
              ++records_;
              continue;
            }
            const bool ours =
                *kind == kill9::Kind::kText
                    ? run.is_string() && kill9::ParseStringRun(run.string_value(), &index, &life)
                    : run.is_int() && kill9::ParseIntRun(run.int_value(), &index, &life);
            if (!ours) return Fail("reader: a record no writer writes");
            if (testing::RecordValueAt(b, i).bytes !=
                kill9::ValueBytes(*kind, index, life, b.steps[i])) {
              return Fail("reader: a wrong value");
            }
            auto& [count, max_seq] = seen[{index, life}];
            ++count;
            max_seq = std::max(max_seq, b.steps[i]);
            ++records_;
          }
        }
      }
      for (const auto& [life, cm] : seen) {
        const auto [count, max_seq] = cm;
        const std::string who =
            "w" + std::to_string(life.first) + "-" + std::to_string(life.second);
        if (max_seq != count - 1) Fail("reader: " + who + " shows records that are not a prefix");
        if (!kill9::CommitsAfter(life.first, life.second, max_seq)) {
          Fail("reader: " + who + " shows part of a commit");
        }
        if (count < last[life]) Fail("reader: " + who + " lost records between refreshes");
        last[life] = count;
      }
      ++refreshes_;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const std::string path_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refreshes_{0}, records_{0};
  std::mutex mu_;
  std::string failures_;
  std::vector<std::thread> threads_;
};

// A command run over and over beside the writers (`runstore compact STORE`,
// `runstore sync STAGING STORE`): started again whenever it ends, and
// SIGKILLed at a random moment of each run, drawn uniformly from
// [0, 2 * mean_s] after it starts, so that some runs finish and the others
// die anywhere in their work. Ending by itself with a status other than 0 is
// a failure (its stderr is above); its stdout is dropped.
class ToolLoop {
 public:
  ToolLoop(std::string name, std::vector<std::string> args, std::mt19937_64& rng, double mean_s)
      : name_(std::move(name)), args_(std::move(args)), rng_(rng), mean_s_(mean_s) {}
  ~ToolLoop() { Kill(); }

  void Start() {
    std::vector<char*> argv;
    for (std::string& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) ::dup2(null, 1);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    ++starts_;
    const double kill_after_s = std::uniform_real_distribution<double>(0, 2 * mean_s_)(rng_);
    kill_at_ = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(kill_after_s * 1e6));
  }
  // Starts it again if it has ended; kills and restarts it if its moment has
  // come.
  void Poll() {
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      Ended(status);
      Start();
    } else if (pid_ > 0 && Clock::now() >= kill_at_) {
      Kill();
      Start();
    }
  }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++kills_;
    } else {
      Ended(status);  // it ended just before the signal
    }
  }
  const std::string& name() const { return name_; }
  int starts() const { return starts_; }
  int kills() const { return kills_; }
  int completed() const { return completed_; }
  const std::string& failures() const { return failures_; }

 private:
  void Ended(int status) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      ++completed_;
    } else if (failures_.size() < 2000) {
      failures_ += name_ + " " +
                   (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                      : "died of signal " + std::to_string(WTERMSIG(status))) +
                   " (its stderr is above); ";
    }
  }

  const std::string name_;
  std::vector<std::string> args_;
  std::mt19937_64& rng_;
  const double mean_s_;
  Clock::time_point kill_at_;
  pid_t pid_ = -1;
  int starts_ = 0, kills_ = 0, completed_ = 0;
  std::string failures_;
};

// What the read-back of a store after a kill loop counted.
struct ReadBack {
  uint64_t total = 0, strangers = 0, wrong = 0, duplicates = 0;
  uint64_t acked_commits = 0, verified = 0, lost = 0, unacked_present = 0, unacked_commits = 0;
  uint64_t lives_opened = 0, big_verified = 0, blocks = 0, store_bytes = 0;
  // Resuming runs: lives that resumed, markers found, records hidden as
  // their lives' resumes say (acknowledged by an earlier life, then hidden).
  uint64_t resumes = 0, markers = 0, hidden_acked = 0;
  size_t segments = 0;
};

// The visible records of one resuming run, by step: (series, value bytes).
using ResumingRecords = std::map<int64_t, std::vector<std::pair<kill9::Kind, std::string>>>;

// Checks a resuming run against its lives (in life order) and the steps of
// the resume markers present. A life whose Resume was acknowledged has its
// marker; one killed before that acknowledgement wrote nothing and may have
// one (found among `markers`, unless an earlier life's marker has the same
// step: then the two hide the same records but for the earlier life's
// unacknowledged commit, which may be present or not anyway). Life l is in
// effect from its resume step c_l; step s is shown by L(s), the last life in
// effect with c_l <= s: every step L(s) acknowledged is there with L(s)'s
// value, at most one commit of it beyond them, nothing of any other life,
// and one record per step.
void CheckResuming(int index, const std::vector<const Life*>& lives, const ResumingRecords& seen,
                   const std::set<int64_t>& markers, ReadBack* r) {
  const std::string who = "resuming run of w" + std::to_string(index);
  std::vector<const Life*> in_effect;
  std::set<int64_t> claimed_steps;
  for (const Life* l : lives) {
    const bool resumed = l->life == 0 || l->resumed;
    if (l->life > 0 && l->resumed) {
      ++r->resumes;
      EXPECT_TRUE(markers.count(l->resume_at))
          << who << ": life " << l->life << "'s acknowledged resume at " << l->resume_at
          << " is missing";
    }
    if (resumed || (markers.count(l->resume_at) && !claimed_steps.count(l->resume_at))) {
      in_effect.push_back(l);
      claimed_steps.insert(l->resume_at);
    }
  }
  r->markers += markers.size();
  for (size_t k = 0; k < in_effect.size(); ++k) {
    const Life& l = *in_effect[k];
    const int64_t until = k + 1 < in_effect.size() ? in_effect[k + 1]->resume_at : INT64_MAX;
    // Acknowledged by an earlier life and hidden by this one: must be gone.
    if (k > 0) {
      for (const Life* before : lives) {
        if (before->life >= l.life) break;
        for (int64_t s = std::max(l.resume_at, before->resume_at); s < before->acked_end; ++s) {
          r->hidden_acked += s < until;
        }
      }
    }
    for (int64_t s = l.resume_at; s < std::min(l.acked_end, until); ++s) {
      const kill9::Kind kind = kill9::KindOf(index, l.life, s);
      const auto it = seen.find(s);
      if (it == seen.end()) {
        if (r->lost++ < 5) {
          ADD_FAILURE() << who << ": life " << l.life << "'s acknowledged step " << s
                        << " is missing (resumed at " << l.resume_at << ")";
        }
        continue;
      }
      ++r->verified;
      r->big_verified += kind == kill9::Kind::kBig;
    }
    // Beyond what it acknowledged: at most the commit in flight.
    int64_t end = std::min(l.acked_end, until);
    while (end < until && seen.count(end) && end - l.acked_end < 100000) ++end;
    if (end > l.acked_end) {
      int boundaries = 0;
      for (int64_t s = l.acked_end; s < end; ++s)
        boundaries += kill9::CommitsAfter(index, l.life, s);
      r->unacked_present += static_cast<uint64_t>(end - l.acked_end);
      r->unacked_commits += static_cast<uint64_t>(boundaries);
      EXPECT_LE(boundaries, 1) << who << ": life " << l.life << " shows " << boundaries
                               << " unacknowledged commits";
      EXPECT_TRUE(end == until || kill9::CommitsAfter(index, l.life, end - 1))
          << who << ": life " << l.life << " shows part of a commit";
    }
    for (auto it = seen.lower_bound(l.resume_at); it != seen.end() && it->first < until; ++it) {
      const int64_t s = it->first;
      const kill9::Kind kind = kill9::KindOf(index, l.life, s);
      if (it->second.size() != 1 && r->duplicates++ < 5) {
        ADD_FAILURE() << who << ": step " << s << " shows " << it->second.size() << " records";
      }
      if (s >= end && r->strangers++ < 5) {
        ADD_FAILURE() << who << ": step " << s << " should be hidden (life " << l.life
                      << " is in effect from " << l.resume_at << " and wrote up to " << end << ")";
      }
      for (const auto& [k, bytes] : it->second) {
        if ((k != kind || bytes != kill9::ValueBytes(kind, index, l.life, s)) && r->wrong++ < 5) {
          ADD_FAILURE() << who << ": step " << s << " is not life " << l.life << "'s "
                        << kill9::NameOf(kind) << " record (a hidden life's, or wrong)";
        }
      }
    }
  }
}

// Reads the store back after every process is dead and checks it against
// what the lives acknowledged: every acknowledged record present byte for
// byte (by Scan and by Get), no key twice, nothing no writer would write, and
// per life a prefix of whole commits with at most one unacknowledged commit.
ReadBack CheckStore(const std::string& path, const std::map<std::pair<int, int>, Life>& lives) {
  ReadBack r;
  auto opened = Store::Open(path, {.read_only = true});
  if (!opened.ok()) {
    ADD_FAILURE() << "open for the read-back: " << opened.status().ToString();
    return r;
  }
  auto snap = (*opened)->GetSnapshot();
  auto series = snap->ListSeries();
  if (!series.ok()) {
    ADD_FAILURE() << "list series: " << series.status().ToString();
    return r;
  }
  std::map<std::pair<int, int>, std::map<int64_t, int>> present;  // life -> seq -> times seen
  std::map<int, ResumingRecords> resuming;                        // index -> its run's records
  for (const SeriesInfo& info : *series) {
    auto kind = kill9::KindOfName(info.name);
    if (!kind) {
      ADD_FAILURE() << "a series no writer writes: '" << info.name << "'";
      continue;
    }
    auto scanner = snap->Scan(info.name);
    if (!scanner.ok()) {
      ADD_FAILURE() << "scan of '" << info.name << "': " << scanner.status().ToString();
      continue;
    }
    ScanBatch b;
    while (true) {
      auto more = (*scanner)->Next(&b);
      if (!more.ok()) {
        ADD_FAILURE() << "scan of '" << info.name << "': " << more.status().ToString();
        break;
      }
      if (!*more) break;
      for (size_t i = 0; i < b.count; ++i) {
        ++r.total;
        const RunId run = b.run(i);
        const int64_t seq = b.steps[i];
        int index = -1, life = -1;
        if (run.is_int() && kill9::ParseResumingRun(run.int_value(), &index)) {
          resuming[index][seq].emplace_back(*kind, testing::RecordValueAt(b, i).bytes);
          continue;
        }
        const bool ours =
            *kind == kill9::Kind::kText
                ? run.is_string() && kill9::ParseStringRun(run.string_value(), &index, &life)
                : run.is_int() && kill9::ParseIntRun(run.int_value(), &index, &life);
        if (!ours || !lives.count({index, life}) || seq < 0 ||
            kill9::KindOf(index, life, seq) != *kind) {
          if (r.strangers++ < 5) {
            ADD_FAILURE() << "a record no writer would write: run " << run.ToString() << ", '"
                          << info.name << "', step " << seq;
          }
          continue;
        }
        if (testing::RecordValueAt(b, i).bytes != kill9::ValueBytes(*kind, index, life, seq)) {
          if (r.wrong++ < 5)
            ADD_FAILURE() << "wrong value for run " << run.ToString() << ", step " << seq;
        }
        if (++present[{index, life}][seq] == 2 && r.duplicates++ < 5) {
          ADD_FAILURE() << "key (" << run.ToString() << ", '" << info.name << "', " << seq
                        << ") appears twice";
        }
      }
    }
  }

  // Resuming runs, against their lives and the markers present.
  std::map<int, std::set<int64_t>> markers;
  std::map<int, std::vector<const Life*>> resuming_lives;
  for (const auto& [key, l] : lives) {
    if (l.resume_at >= 0) resuming_lives[l.index].push_back(&l);
  }
  if (!resuming_lives.empty()) {
    auto scanner = snap->Scan("~resume");
    EXPECT_OK(scanner.status());
    ScanBatch b;
    while (scanner.ok()) {
      auto more = (*scanner)->Next(&b);
      EXPECT_OK(more.status());
      if (!more.ok() || !*more) break;
      for (size_t i = 0; i < b.count; ++i) {
        int index = -1;
        if (b.run(i).is_int() && kill9::ParseResumingRun(b.run(i).int_value(), &index)) {
          markers[index].insert(b.steps[i]);
        }
      }
    }
  }
  for (const auto& [index, ls] : resuming_lives) {
    CheckResuming(index, ls, resuming[index], markers[index], &r);
    for (const Life* l : ls) {
      r.acked_commits += l->commits;
      r.lives_opened += l->opened;
    }
  }
  for (const auto& [index, recs] : resuming) {
    if (!resuming_lives.count(index)) {
      ADD_FAILURE() << "a resuming run no writer writes: " << index;
      ++r.strangers;
    }
  }

  // Per life: whole commits, in order, all acknowledged ones, at most one more.
  for (const auto& [key, l] : lives) {
    if (l.resume_at >= 0) continue;  // above
    r.acked_commits += l.commits;
    r.lives_opened += l.opened;
    const auto it = present.find(key);
    const std::map<int64_t, int> none;
    const std::map<int64_t, int>& seqs = it == present.end() ? none : it->second;
    const int64_t p = static_cast<int64_t>(seqs.size());
    const std::string who = "w" + std::to_string(l.index) + "-" + std::to_string(l.life);
    const bool prefix = seqs.empty() || (seqs.begin()->first == 0 && seqs.rbegin()->first == p - 1);
    EXPECT_TRUE(prefix) << who << ": the records present are not a prefix of its sequence";
    EXPECT_TRUE(p == 0 || kill9::CommitsAfter(l.index, l.life, p - 1))
        << who << ": " << p << " records present end inside a commit: a commit is partly visible";
    for (int64_t s = 0; s < l.acked_end; ++s) {
      if (seqs.count(s)) {
        ++r.verified;
      } else if (r.lost++ < 5) {
        ADD_FAILURE() << who << ": acknowledged record " << s << " is missing";
      }
    }
    if (p > l.acked_end) {
      r.unacked_present += static_cast<uint64_t>(p - l.acked_end);
      int boundaries = 0;
      for (int64_t s = l.acked_end; s < p; ++s)
        boundaries += kill9::CommitsAfter(l.index, l.life, s);
      r.unacked_commits += static_cast<uint64_t>(boundaries);
      EXPECT_LE(boundaries, 1)
          << who << ": " << boundaries
          << " unacknowledged commits are visible; only the one in flight may be";
    }
    // Get agrees with Scan for every acknowledged record.
    for (int64_t s = 0; s < l.acked_end; ++s) {
      const kill9::Kind kind = kill9::KindOf(l.index, l.life, s);
      const RunId run = kind == kill9::Kind::kText ? RunId(kill9::StringRun(l.index, l.life))
                                                   : RunId(kill9::IntRun(l.index, l.life));
      auto v = snap->Get(run, kill9::NameOf(kind), s);
      if (!v.ok()) {
        ADD_FAILURE() << who << ": Get of acknowledged record " << s << ": "
                      << v.status().ToString();
        continue;
      }
      if (std::string_view(v->data(), v->nbytes()) != kill9::ValueBytes(kind, l.index, l.life, s)) {
        ADD_FAILURE() << who << ": Get returns a wrong value for record " << s;
      }
      r.big_verified += kind == kill9::Kind::kBig;
    }
  }
  EXPECT_OK(snap->Verify(&r.blocks));
  EXPECT_TRUE(snap->DamagedSegments().empty());
  for (const auto& e : std::filesystem::recursive_directory_iterator(path)) {
    if (e.is_regular_file()) r.store_bytes += e.file_size();
  }
  r.segments = snap->ListSegments().size();
  EXPECT_EQ(r.lost, 0u);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_EQ(r.strangers, 0u);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_GT(r.verified, 1000u) << "the writers acknowledged too little for the test to mean much";
  return r;
}

void PrintFigures(const char* what, uint64_t seed, int rounds, const Supervisor& sup,
                  const ReadBack& r, double writing_s, double total_s) {
  std::printf(
      "[ figures  ] %s: seed=%llu rounds=%d writer kills=%d writer lives=%zu (opened %llu) "
      "acknowledged commits=%llu records verified=%llu (256 KiB arrays %llu) records lost=%llu "
      "unacknowledged-but-present records=%llu (in %llu commits) records in store=%llu "
      "duplicates=%llu strangers=%llu wrong values=%llu; resumes=%llu markers=%llu "
      "acknowledged records hidden by later resumes=%llu; segments=%zu, %.1f MiB, blocks "
      "verified=%llu; writing %.1f s, total %.1f s\n",
      what, static_cast<unsigned long long>(seed), rounds, sup.kills(), sup.lives().size(),
      static_cast<unsigned long long>(r.lives_opened),
      static_cast<unsigned long long>(r.acked_commits), static_cast<unsigned long long>(r.verified),
      static_cast<unsigned long long>(r.big_verified), static_cast<unsigned long long>(r.lost),
      static_cast<unsigned long long>(r.unacked_present),
      static_cast<unsigned long long>(r.unacked_commits), static_cast<unsigned long long>(r.total),
      static_cast<unsigned long long>(r.duplicates), static_cast<unsigned long long>(r.strangers),
      static_cast<unsigned long long>(r.wrong), static_cast<unsigned long long>(r.resumes),
      static_cast<unsigned long long>(r.markers), static_cast<unsigned long long>(r.hidden_acked),
      r.segments, r.store_bytes / 1048576.0, static_cast<unsigned long long>(r.blocks), writing_s,
      total_s);
  std::fflush(stdout);
}

// The kill loop of both tests. Writers of even index keep one id across their
// lives (a job restarted with a fixed id), and every other restart of those
// that write to the store directly starts the new life before the old one is
// killed: two live writers with one id. With `stagings` (one node-local
// directory per node), writers of index kWriters/2 and up stage in them, in
// turn (each with a fixed id, as a SLURM task that restarts), and `tools` (the
// compactor and a sync per node) run and die beside them.
// The loop ends after `min_rounds` kills once `min_seconds` have passed (and
// at most after the wall budget), or after `soak` seconds.
struct KillLoop {
  std::mt19937_64& rng;
  Supervisor& sup;
  std::vector<ToolLoop*> tools;
  std::vector<std::string> stagings;
  int max_sleep_ms = kMaxSleepMs;
  int min_rounds = kRounds;
  double min_seconds = 0;
  int rounds = 0, overlaps = 0;

  // Writers of odd index resume their run at each restart, as a training
  // run restarted from a checkpoint (`resumes`): the later commits hide
  // what their previous lives wrote from the checkpoint on.
  bool resumes = false;
  bool Resumes(int index) const { return resumes && index % 2 == 1; }
  bool Stages(int index) const { return !stagings.empty() && index >= kWriters / 2; }
  // Where life `life` of a resuming writer resumes: the end of one of the
  // commits its previous life acknowledged (the newest, as a checkpoint
  // usually is, or an older one), or that life's own resume step.
  int64_t ResumeAt(int index, int life) {
    if (!Resumes(index)) return -1;
    if (life == 0) return 0;
    const Life& prev = sup.lives().at({index, life - 1});
    const std::vector<int64_t>& b = prev.boundaries;
    return rng() % 2 == 0 ? b.back() : b[rng() % b.size()];
  }
  std::string IdOf(int index) const {
    return index % 2 == 0 || Stages(index) ? "w" + std::to_string(index) : "";
  }
  std::string StagingOf(int index) const {
    return Stages(index) ? stagings[static_cast<size_t>(index) % stagings.size()] : "";
  }

  void Pump() {
    sup.Pump(static_cast<int>(rng() % (max_sleep_ms + 1)));
    for (ToolLoop* t : tools) t->Poll();
  }

  void Run(Clock::time_point start, double soak) {
    std::map<int, int> life_of;
    for (int i = 0; i < kWriters; ++i) {
      ASSERT_NO_FATAL_FAILURE(sup.Spawn(i, 0, {}, IdOf(i), StagingOf(i), ResumeAt(i, 0)));
      life_of[i] = 0;
    }
    for (ToolLoop* t : tools) ASSERT_NO_FATAL_FAILURE(t->Start());
    for (;; ++rounds) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (soak > 0 ? elapsed > soak
                   : (rounds >= min_rounds && elapsed >= min_seconds) ||
                         (rounds >= 50 && elapsed > kWallBudgetSeconds)) {
        break;
      }
      Pump();
      const int victim = static_cast<int>(rng() % kWriters);
      const int old_life = life_of[victim];
      if (victim % 2 == 0 && !Stages(victim) && !Resumes(victim) && rng() % 2 == 0) {
        ASSERT_NO_FATAL_FAILURE(sup.Spawn(victim, ++life_of[victim], {}, IdOf(victim)));
        Pump();
        sup.Kill(victim, old_life);
        ++overlaps;
      } else {
        sup.Kill(victim, old_life);
        const int life = ++life_of[victim];
        ASSERT_NO_FATAL_FAILURE(
            sup.Spawn(victim, life, {}, IdOf(victim), StagingOf(victim), ResumeAt(victim, life)));
      }
    }
    Pump();
    sup.KillAll();
    for (ToolLoop* t : tools) t->Kill();
  }
};

std::string RequireProgram(const char* name) {
  const std::string program = HelperPath(name);
  EXPECT_EQ(::access(program.c_str(), X_OK), 0)
      << program << " is missing: build the " << name << " target";
  return program;
}

TEST(Kill9Test, EveryAcknowledgedCommitSurvivesSigkillOfConcurrentWriters) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const std::string program = RequireProgram("kill9_writer");
  ASSERT_FALSE(HasFailure());
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK(Store::Open(path, {}).status());  // created once, before the writers race

  const auto start = Clock::now();
  const double soak = SoakSeconds("RUNSTORE_SOAK_SECONDS");
  Supervisor sup(path, program);
  Readers readers(path, kReaders);
  KillLoop loop{rng, sup, {}, {}};
  ASSERT_NO_FATAL_FAILURE(loop.Run(start, soak));
  readers.Stop();
  const double writing_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(sup.failures(), "") << "writers must only ever die of SIGKILL";
  EXPECT_EQ(readers.failures(), "");
  EXPECT_GT(readers.refreshes(), 0u);
  for (const auto& [key, l] : sup.lives())
    EXPECT_EQ(l.problems, "") << "w" << l.index << "-" << l.life;

  const ReadBack r = CheckStore(path, sup.lives());
  std::printf(
      "[ figures  ] readers: refreshes=%llu records checked=%llu; lives started while "
      "another life of their id ran: %d\n",
      static_cast<unsigned long long>(readers.refreshes()),
      static_cast<unsigned long long>(readers.records()), loop.overlaps);
  PrintFigures("kill -9", seed, loop.rounds, sup, r, writing_s,
               std::chrono::duration<double>(Clock::now() - start).count());
  EXPECT_GE(loop.rounds, 50);
}

// The same loop as a cluster job runs it (docs/design.md#staging,
// #compaction): 6 writers of which 3 stage on "node-local" disk, a compactor
// and a sync per node, all killed at random for at least 50 rounds while
// readers refresh; then a forced sync (every writer is dead) and a compaction
// that removes the killed compactions' leftovers. The store must hold exactly
// what the model of acknowledged commits says, and only segments. Two nodes:
// one whose local directory shares the store's file system (shipping copies
// in the kernel, copy_file_range) and, where /dev/shm is another file system,
// one staging there, as a cluster's node-local disk is never the shared
// store's (shipping copies through a buffer: the kernel refuses with EXDEV).
TEST(Kill9Test, StagingWritersCompactionAndSyncAllKilledLoseNothing) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  const std::string program = RequireProgram("kill9_writer");
  const std::string cli = RequireProgram("cli/runstore");
  ASSERT_FALSE(HasFailure());
  TempDir dir;
  const std::string path = dir.path() + "/store";
  std::vector<std::string> stagings = {dir.path() + "/local"};
  struct stat here, shm;
  const std::string shm_dir = "/dev/shm/runstore-kill9-" + std::to_string(::getpid());
  if (::stat(dir.path().c_str(), &here) == 0 && ::stat("/dev/shm", &shm) == 0 &&
      here.st_dev != shm.st_dev) {
    stagings.push_back(shm_dir);
  }
  struct RemoveShm {
    std::string dir;
    ~RemoveShm() { std::filesystem::remove_all(dir); }
  } remove_shm{stagings.size() > 1 ? shm_dir : ""};
  std::printf("[ staging  ] %s\n", stagings.size() > 1
                                       ? "node 1 beside the store, node 2 on /dev/shm (another "
                                         "file system: shipping copies through a buffer)"
                                       : "one node, beside the store (/dev/shm is not another "
                                         "file system here)");
  ASSERT_OK(Store::Open(path, {}).status());
  // Node-local scratch exists before the job's processes start ($SLURM_TMPDIR):
  // a sync started before the first staging writer must find it.
  for (const std::string& staging : stagings) std::filesystem::create_directories(staging);

  const auto start = Clock::now();
  const double soak = SoakSeconds("RUNSTORE_CLUSTER_SOAK_SECONDS");
  Supervisor sup(path, program);
  // Segments of 1 MiB roll often; merging only the small ones leaves most of
  // the compactor's outputs alone, as a cron job with --smaller-than would.
  // Replaced segments stay 5 s (not the default 300) so that later runs,
  // killed too, remove them within the test; the readers' snapshots are
  // younger than that.
  ToolLoop compactor("runstore compact",
                     {cli, "compact", path, "--smaller-than", "4M", "--retain", "5"}, rng, 2);
  // Its default --wait of 5 s: a dead writer's open segment is shipped after
  // 5 s without a beat of its lease; some runs finish, most die watching or
  // shipping.
  std::vector<std::unique_ptr<ToolLoop>> syncs;
  std::vector<ToolLoop*> tools = {&compactor};
  for (const std::string& staging : stagings) {
    syncs.push_back(std::make_unique<ToolLoop>(
        "runstore sync", std::vector<std::string>{cli, "sync", staging, path}, rng, 8));
    tools.push_back(syncs.back().get());
  }
  Readers readers(path, kReaders);
  KillLoop loop{rng, sup, tools, stagings};
  // Writers 1, 3 and 5 resume their runs at every restart; 3 and 5 stage:
  // compaction must never move a resume marker or an overwritten value past
  // a commit still in staging (docs/design.md#compaction-and-staging).
  loop.resumes = true;
  // Between kills: up to 400 ms, so that writers write more than they start;
  // a soak kills as often as the writers-only loop, so that the store grows
  // by about a GiB in half an hour, not tens.
  loop.max_sleep_ms = soak > 0 ? kMaxSleepMs : 400;
  loop.min_rounds = 60;
  loop.min_seconds = 40;
  ASSERT_NO_FATAL_FAILURE(loop.Run(start, soak));
  readers.Stop();
  const double writing_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(sup.failures(), "") << "writers must only ever die of SIGKILL";
  EXPECT_EQ(compactor.failures(), "");
  for (const auto& sync : syncs) EXPECT_EQ(sync->failures(), "");
  EXPECT_EQ(readers.failures(), "");
  EXPECT_GT(readers.refreshes(), 0u);
  for (const auto& [key, l] : sup.lives())
    EXPECT_EQ(l.problems, "") << "w" << l.index << "-" << l.life;

  // The job's epilogue: every process has ended.
  SyncReport synced;
  SyncOptions so;
  so.force = true;
  for (const std::string& staging : stagings) {
    SyncReport one;
    ASSERT_OK(SyncStaging(staging, path, so, &one));
    synced.shipped.insert(synced.shipped.end(), one.shipped.begin(), one.shipped.end());
    synced.already_published.insert(synced.already_published.end(), one.already_published.begin(),
                                    one.already_published.end());
    synced.cleaned.insert(synced.cleaned.end(), one.cleaned.begin(), one.cleaned.end());
    synced.bytes_shipped += one.bytes_shipped;
  }
  CompactReport compacted;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
    CompactOptions co;
    co.lease_expiry_s = 0;  // every compactor is dead
    co.lease_refresh_s = 0;
    ASSERT_OK(store->Compact(co, &compacted));
  }
  for (const std::string& staging : stagings) {
    ASSERT_OK_AND_ASSIGN(auto left, Env::Default()->GetChildren(staging));
    std::erase_if(left, [](const std::string& n) { return n == "." || n == ".."; });
    EXPECT_TRUE(left.empty()) << left.size() << " files left in " << staging << ", e.g. "
                              << left.front();
  }
  ASSERT_OK_AND_ASSIGN(auto in_store, Env::Default()->GetChildren(path + "/segments"));
  for (const std::string& n : in_store) EXPECT_TRUE(n.ends_with(".rss")) << n;

  const ReadBack r = CheckStore(path, sup.lives());
  std::string sync_figures;
  int sync_kills = 0;
  for (size_t i = 0; i < syncs.size(); ++i) {
    sync_figures += (i ? "; node " : "node ") + std::to_string(i + 1) +
                    " started=" + std::to_string(syncs[i]->starts()) +
                    " killed=" + std::to_string(syncs[i]->kills()) +
                    " completed=" + std::to_string(syncs[i]->completed());
    sync_kills += syncs[i]->kills();
  }
  std::printf(
      "[ figures  ] readers: refreshes=%llu records checked=%llu; compactions started=%d "
      "killed=%d completed=%d; syncs: %s; final sync shipped %zu "
      "segments (%llu bytes), %zu already published, %zu cleaned; final compaction merged %zu "
      "segments into %zu (%zu left out by commit order, %zu held back by %zu claims)\n",
      static_cast<unsigned long long>(readers.refreshes()),
      static_cast<unsigned long long>(readers.records()), compactor.starts(), compactor.kills(),
      compactor.completed(), sync_figures.c_str(), synced.shipped.size(),
      static_cast<unsigned long long>(synced.bytes_shipped), synced.already_published.size(),
      synced.cleaned.size(), compacted.inputs.size(), compacted.outputs.size(),
      compacted.excluded.size(), compacted.held_back.size(), compacted.staged.size());
  for (const std::string& claim : compacted.staged) ADD_FAILURE() << "a claim is left: " << claim;
  PrintFigures("cluster kill -9", seed, loop.rounds, sup, r, writing_s,
               std::chrono::duration<double>(Clock::now() - start).count());
  EXPECT_GE(loop.rounds, 50);
  EXPECT_GT(compactor.kills(), 0);
  EXPECT_GT(sync_kills, 0);
}

// An MPI job's ranks all open the same new store at the same moment, each
// with create_if_missing: every one of them must succeed, whichever creates
// the directory, segments/ and the RUNSTORE marker, and whatever the others
// see half-made meanwhile (docs/design.md#invariant-5: any number of writers, no locks).
TEST(Kill9Test, ManyProcessesCreatingOneStoreAtOnceAllSucceed) {
  const std::string program = HelperPath("kill9_writer");
  ASSERT_EQ(::access(program.c_str(), X_OK), 0)
      << program << " is missing: build the kill9_writer target";
  constexpr int kProcesses = 8, kTrials = 20;
  TempDir dir;
  int failed_processes = 0, failed_trials = 0;
  uint64_t acked = 0;
  std::string first_failure;
  for (int trial = 0; trial < kTrials; ++trial) {
    const std::string path = dir.path() + "/store" + std::to_string(trial);
    Supervisor sup(path, program);
    // All start 150 ms from now, long enough for every exec to finish.
    const auto at = std::chrono::system_clock::now() + std::chrono::milliseconds(150);
    const std::string at_ns = std::to_string(
        std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count());
    for (int i = 0; i < kProcesses; ++i) ASSERT_NO_FATAL_FAILURE(sup.Spawn(i, 0, {"0.02", at_ns}));
    int failed_here = 0;
    for (int i = 0; i < kProcesses; ++i) {
      const int status = sup.Reap(i, 0);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        ++failed_here;
        if (first_failure.empty()) {
          first_failure = "trial " + std::to_string(trial) + ", process " + std::to_string(i) +
                          ": wait status " + std::to_string(status) + " (its stderr is above)";
        }
      }
    }
    failed_processes += failed_here;
    failed_trials += failed_here > 0;
    // Whatever failed, what the others acknowledged is in the store.
    auto store = Store::Open(path, {.read_only = true});
    ASSERT_TRUE(store.ok()) << "trial " << trial << ": " << store.status().ToString();
    auto snap = (*store)->GetSnapshot();
    for (const auto& [key, l] : sup.lives()) {
      for (int64_t s = 0; s < l.acked_end; ++s) {
        const kill9::Kind kind = kill9::KindOf(l.index, l.life, s);
        const RunId run = kind == kill9::Kind::kText ? RunId(kill9::StringRun(l.index, l.life))
                                                     : RunId(kill9::IntRun(l.index, l.life));
        auto v = snap->Get(run, kill9::NameOf(kind), s);
        ASSERT_TRUE(v.ok()) << "trial " << trial << ": " << v.status().ToString();
        EXPECT_EQ(std::string_view(v->data(), v->nbytes()),
                  kill9::ValueBytes(kind, l.index, l.life, s));
        ++acked;
      }
    }
  }
  std::printf(
      "[ figures  ] concurrent creation: trials=%d processes per trial=%d failed processes=%d "
      "failed trials=%d acknowledged records verified=%llu\n",
      kTrials, kProcesses, failed_processes, failed_trials, static_cast<unsigned long long>(acked));
  EXPECT_EQ(failed_processes, 0) << "first: " << first_failure;
}

}  // namespace
}  // namespace runstore
