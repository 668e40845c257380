// Real staging writer processes, kill -9, then a sync (docs/design.md#staging;
// STYLE.md "Tests that try to break it"). Writers (tests/programs/kill9_writer,
// staging through $RUNSTORE_STAGING_DIR, one writer id per index shared by all
// of its lives, so that restarts continue the id's numbers claimed in the
// store) are SIGKILLed at random, round after round, and restarted; then all
// are killed and SyncStaging ships what they left. Every acknowledged record
// must be in the store byte for byte, no key twice, each life's records a
// prefix of what it wrote (whole commits, in order), nothing left in staging
// and no temporary in the store.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
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

using ::runstore::testing::TempDir;
using ::runstore::testing::TestSeed;

constexpr int kWriters = 4;
constexpr int kRounds = 20;

std::string HelperPath(const char* name) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return name;
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + name;
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string buf;
  int64_t acked_end = 0;  // seqs [0, acked_end) acknowledged
  uint64_t acks = 0;
};

class Supervisor {
 public:
  Supervisor(std::string store, std::string staging)
      : store_(std::move(store)), staging_(std::move(staging)) {}
  ~Supervisor() {
    for (auto& [key, c] : children_) Kill(key);
  }

  void Spawn(int index, int life) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0) << std::strerror(errno);
    const std::string program = HelperPath("kill9_writer");
    std::vector<std::string> args{program, store_, std::to_string(index), std::to_string(life)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string id_var = "KILL9_WRITER_ID=w" + std::to_string(index);
    std::string staging_var = "RUNSTORE_STAGING_DIR=" + staging_;
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "KILL9_WRITER_ID=", 16) != 0 &&
          std::strncmp(*e, "RUNSTORE_STAGING_DIR=", 21) != 0) {
        envp.push_back(*e);
      }
    }
    envp.push_back(id_var.data());
    envp.push_back(staging_var.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::execve(program.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    Child& c = children_[{index, life}];
    c.pid = pid;
    c.fd = fds[0];
  }

  void Pump(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (true) {
      const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            until - std::chrono::steady_clock::now())
                                            .count());
      std::vector<pollfd> pfds;
      std::vector<std::pair<int, int>> owners;
      for (auto& [key, c] : children_) {
        if (c.fd >= 0) {
          pfds.push_back(pollfd{c.fd, POLLIN, 0});
          owners.push_back(key);
        }
      }
      if (::poll(pfds.data(), pfds.size(), std::max(left, 0)) > 0) {
        for (size_t i = 0; i < pfds.size(); ++i) {
          if (pfds[i].revents & (POLLIN | POLLHUP)) ReadSome(children_[owners[i]]);
        }
      }
      if (left <= 0) break;
    }
  }

  void Kill(std::pair<int, int> key) {
    Child& c = children_[key];
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        failures_ += "writer " + std::to_string(key.first) + " life " + std::to_string(key.second) +
                     " ended by itself (status " + std::to_string(status) + "); ";
      }
      c.pid = -1;
      ++kills_;
    }
    while (c.fd >= 0) ReadSome(c);
  }

  std::map<std::pair<int, int>, Child>& children() { return children_; }
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
      std::istringstream in(c.buf.substr(0, nl));
      c.buf.erase(0, nl + 1);
      std::string word;
      uint64_t n_ack = 0;
      int64_t first = -1, last = -1;
      in >> word >> n_ack >> first >> last;
      if (word != "ACK") continue;  // OPEN
      if (in.fail() || first != c.acked_end || last < first) {
        failures_ += "bad ACK line; ";
        continue;
      }
      c.acked_end = last + 1;
      ++c.acks;
    }
  }

  const std::string store_, staging_;
  std::map<std::pair<int, int>, Child> children_;
  int kills_ = 0;
  std::string failures_;
};

TEST(StagingKill9Test, EveryAcknowledgedCommitIsInTheStoreOnceAfterKillsAndASync) {
  const uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string store_path = dir.path() + "/store", staging = dir.path() + "/local";
  { ASSERT_OK_AND_ASSIGN(auto s, Store::Open(store_path, {})); }
  const auto start = std::chrono::steady_clock::now();
  std::map<int, int> life;  // index -> current life
  {
    Supervisor sup(store_path, staging);
    for (int i = 0; i < kWriters; ++i) sup.Spawn(i, life[i] = 0);
    for (int round = 0; round < kRounds; ++round) {
      sup.Pump(static_cast<int>(50 + rng() % 250));
      const int victim = static_cast<int>(rng() % kWriters);
      sup.Kill({victim, life[victim]});
      sup.Spawn(victim, ++life[victim]);
    }
    sup.Pump(200);
    for (int i = 0; i < kWriters; ++i) sup.Kill({i, life[i]});
    EXPECT_EQ(sup.failures(), "");

    SyncReport report;
    SyncOptions o;
    o.force = true;  // every writer is dead: the test killed them
    ASSERT_OK(SyncStaging(staging, store_path, o, &report));

    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path, {.read_only = true}));
    auto snap = store->GetSnapshot();
    ASSERT_OK_AND_ASSIGN(auto series, snap->ListSeries());
    std::map<std::pair<int, int>, std::map<int64_t, int>> present;
    uint64_t records = 0, wrong = 0, strangers = 0, duplicates = 0;
    for (const SeriesInfo& info : series) {
      auto kind = kill9::KindOfName(info.name);
      ASSERT_TRUE(kind.has_value()) << info.name;
      ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan(info.name));
      ScanBatch b;
      while (true) {
        ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
        if (!more) break;
        for (size_t i = 0; i < b.count; ++i) {
          ++records;
          const RunId run = b.run(i);
          const int64_t seq = b.steps[i];
          int index = -1, l = -1;
          const bool ours =
              *kind == kill9::Kind::kText
                  ? run.is_string() && kill9::ParseStringRun(run.string_value(), &index, &l)
                  : run.is_int() && kill9::ParseIntRun(run.int_value(), &index, &l);
          if (!ours || !sup.children().count({index, l}) || kill9::KindOf(index, l, seq) != *kind) {
            ++strangers;
            continue;
          }
          if (testing::RecordValueAt(b, i).bytes != kill9::ValueBytes(*kind, index, l, seq)) {
            ++wrong;
          }
          if (++present[{index, l}][seq] == 2) ++duplicates;
        }
      }
    }
    uint64_t acked_records = 0, acks = 0, missing = 0, gaps = 0;
    for (auto& [key, c] : sup.children()) {
      acked_records += static_cast<uint64_t>(c.acked_end);
      acks += c.acks;
      const auto& seqs = present[key];
      for (int64_t s = 0; s < c.acked_end; ++s) {
        if (!seqs.count(s) && missing++ < 5) {
          ADD_FAILURE() << "writer " << key.first << " life " << key.second << ": acknowledged seq "
                        << s << " is missing";
        }
      }
      if (!seqs.empty() && seqs.rbegin()->first + 1 != static_cast<int64_t>(seqs.size())) ++gaps;
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(strangers, 0u);
    EXPECT_EQ(duplicates, 0u);
    EXPECT_EQ(missing, 0u);
    EXPECT_EQ(gaps, 0u) << "a life's records are not a prefix of what it wrote";
    EXPECT_GT(acks, 0u);
    EXPECT_TRUE(snap->DamagedSegments().empty());
    ASSERT_OK_AND_ASSIGN(auto left, Env::Default()->GetChildren(staging));
    EXPECT_TRUE(left.empty()) << left.size() << " files left in staging, e.g. " << left.front();
    ASSERT_OK_AND_ASSIGN(auto in_store, Env::Default()->GetChildren(store_path + "/segments"));
    for (const std::string& n : in_store) EXPECT_TRUE(n.ends_with(".rss")) << n;
    std::printf(
        "staging kill -9: seed %llu, %d writers, %d rounds, %d kills, %llu acknowledged commits "
        "(%llu records), %llu records read back; sync shipped %zu segments (%llu bytes), %zu "
        "already published, %zu cleaned; %.1f s\n",
        static_cast<unsigned long long>(seed), kWriters, kRounds, sup.kills(),
        static_cast<unsigned long long>(acks), static_cast<unsigned long long>(acked_records),
        static_cast<unsigned long long>(records), report.shipped.size(),
        static_cast<unsigned long long>(report.bytes_shipped), report.already_published.size(),
        report.cleaned.size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

}  // namespace
}  // namespace runstore
