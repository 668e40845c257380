// Tests of FaultInjectionEnv over the POSIX env (in a temporary directory)
// and over the in-memory env: the power-loss model, injected errors, crashes.
#include "testing/fault_injection_env.h"

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runstore/env.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::testing::HasSubstr;

enum class BaseKind { kPosix, kMem };

class FaultInjectionEnvTest : public ::testing::TestWithParam<BaseKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BaseKind::kPosix) {
      temp_dir_ = std::make_unique<testing::TempDir>();
      base_ = Env::Default();
      root_ = temp_dir_->path();
    } else {
      mem_env_ = NewMemEnv();
      base_ = mem_env_.get();
      root_ = "/test";
      ASSERT_OK(base_->CreateDir(root_));  // through the base: durable
    }
    env_ = std::make_unique<FaultInjectionEnv>(base_);
  }

  std::string Path(std::string_view name) const { return root_ + "/" + std::string(name); }

  // Creates `name` through the fault env, SyncDirs the directory holding it,
  // appends and syncs `synced`, then appends `unsynced`.
  void WriteDurableName(std::string_view name, std::string_view synced,
                        std::string_view unsynced = "") {
    const std::string path = Path(name);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(path, false));
    ASSERT_OK(env_->SyncDir(path.substr(0, path.rfind('/'))));
    ASSERT_OK(file->Append(synced));
    ASSERT_OK(file->Sync());
    ASSERT_OK(file->Append(unsynced));
    ASSERT_OK(file->Close());
  }

  // The file's contents on the base env, or "<missing>".
  std::string Contents(std::string_view name) {
    Result<std::string> contents = ReadFileToString(base_, Path(name));
    if (contents.status().code() == StatusCode::kNotFound) return "<missing>";
    EXPECT_TRUE(contents.ok()) << contents.status().ToString();
    return contents.ok() ? *contents : std::string();
  }

  void PowerLoss(DropMode mode = DropMode::kDropUnsynced, uint64_t seed = 0) {
    ASSERT_OK(env_->SimulatePowerLoss(mode, seed));
  }

  std::unique_ptr<testing::TempDir> temp_dir_;
  std::unique_ptr<Env> mem_env_;
  Env* base_ = nullptr;
  std::unique_ptr<FaultInjectionEnv> env_;
  std::string root_;
};

INSTANTIATE_TEST_SUITE_P(AllBases, FaultInjectionEnvTest,
                         ::testing::Values(BaseKind::kPosix, BaseKind::kMem),
                         [](const ::testing::TestParamInfo<BaseKind>& info) {
                           return info.param == BaseKind::kPosix ? "Posix" : "Mem";
                         });

TEST_P(FaultInjectionEnvTest, UnsyncedDataIsDroppedOnPowerLoss) {
  WriteDurableName("f", "synced;", "unsynced");
  EXPECT_EQ(Contents("f"), "synced;unsynced");  // the OS has it all
  PowerLoss();
  EXPECT_EQ(Contents("f"), "synced;");
}

// SyncPrefix(n) makes the first n bytes durable and no more, whatever was
// appended meanwhile; a later, shorter one takes nothing back.
TEST_P(FaultInjectionEnvTest, SyncPrefixMakesOnlyItsPrefixDurable) {
  const std::string path = Path("f");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(path, false));
  ASSERT_OK(env_->SyncDir(path.substr(0, path.rfind('/'))));
  ASSERT_OK(file->Append("first;second;"));
  std::thread syncer([&] { EXPECT_OK(file->SyncPrefix(6)); });
  ASSERT_OK(file->Append("third;"));
  syncer.join();
  ASSERT_OK(file->SyncPrefix(3));
  ASSERT_OK(file->WriteAt(6, "SECOND"));
  ASSERT_OK(file->Close());
  PowerLoss();
  EXPECT_EQ(Contents("f"), "first;");
}

TEST_P(FaultInjectionEnvTest, SyncedDataSurvivesPowerLoss) {
  WriteDurableName("f", "all of it synced");
  PowerLoss(DropMode::kTornGarbage, 7);
  EXPECT_EQ(Contents("f"), "all of it synced");
}

TEST_P(FaultInjectionEnvTest, FileCreatedWithoutSyncDirVanishes) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(Path("f"), true));
  ASSERT_OK(file->Append("data synced, name not"));
  ASSERT_OK(file->Sync());
  ASSERT_OK(file->Close());
  PowerLoss();
  EXPECT_EQ(Contents("f"), "<missing>");
}

TEST_P(FaultInjectionEnvTest, DurableNameWithoutSyncedDataIsEmpty) {
  WriteDurableName("f", "", "never synced");
  PowerLoss();
  EXPECT_EQ(Contents("f"), "");
}

TEST_P(FaultInjectionEnvTest, RenameWithoutSyncDirIsUndone) {
  WriteDurableName("a", "new version");
  WriteDurableName("b", "old version");
  ASSERT_OK(env_->RenameFile(Path("a"), Path("b")));
  EXPECT_EQ(Contents("a"), "<missing>");
  EXPECT_EQ(Contents("b"), "new version");
  PowerLoss();
  EXPECT_EQ(Contents("a"), "new version");
  EXPECT_EQ(Contents("b"), "old version");
}

TEST_P(FaultInjectionEnvTest, RenameOntoNewNameWithoutSyncDirIsUndone) {
  WriteDurableName("a", "contents");
  ASSERT_OK(env_->RenameFile(Path("a"), Path("b")));
  PowerLoss();
  EXPECT_EQ(Contents("a"), "contents");
  EXPECT_EQ(Contents("b"), "<missing>");
}

TEST_P(FaultInjectionEnvTest, RenameFollowedBySyncDirIsDurable) {
  WriteDurableName("a", "new version");
  WriteDurableName("b", "old version");
  ASSERT_OK(env_->RenameFile(Path("a"), Path("b")));
  ASSERT_OK(env_->SyncDir(root_));
  PowerLoss();
  EXPECT_EQ(Contents("a"), "<missing>");
  EXPECT_EQ(Contents("b"), "new version");
}

TEST_P(FaultInjectionEnvTest, RenamedFileKeepsItsUnsyncedDataRule) {
  WriteDurableName("tmp", "synced", "+unsynced");
  ASSERT_OK(env_->RenameFile(Path("tmp"), Path("final")));
  ASSERT_OK(env_->SyncDir(root_));
  PowerLoss();
  EXPECT_EQ(Contents("final"), "synced");
}

TEST_P(FaultInjectionEnvTest, RemoveWithoutSyncDirIsUndone) {
  WriteDurableName("f", "still here", "+gone");
  ASSERT_OK(env_->RemoveFile(Path("f")));
  EXPECT_EQ(Contents("f"), "<missing>");
  PowerLoss();
  EXPECT_EQ(Contents("f"), "still here");
}

TEST_P(FaultInjectionEnvTest, RemoveFollowedBySyncDirIsDurable) {
  WriteDurableName("f", "x");
  ASSERT_OK(env_->RemoveFile(Path("f")));
  ASSERT_OK(env_->SyncDir(root_));
  PowerLoss();
  EXPECT_EQ(Contents("f"), "<missing>");
}

TEST_P(FaultInjectionEnvTest, DirectoryCreatedWithoutSyncDirLosesItsContents) {
  ASSERT_OK(env_->CreateDir(Path("kept")));
  ASSERT_OK(env_->SyncDir(root_));
  WriteDurableName("kept/f", "file, name and directory synced");
  ASSERT_OK(env_->CreateDir(Path("lost")));
  WriteDurableName("lost/f", "file and name synced, directory not");
  PowerLoss();
  EXPECT_EQ(Contents("kept/f"), "file, name and directory synced");
  EXPECT_EQ(Contents("lost/f"), "<missing>");
  // The model cannot remove the directory itself (Env has no RemoveDir).
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> children, base_->GetChildren(Path("lost")));
  EXPECT_TRUE(children.empty());
}

TEST_P(FaultInjectionEnvTest, FailOperationFailsExactlyTheNthOperationWithItsErrno) {
  for (const int err : {EIO, ENOSPC}) {
    for (uint64_t n = 1; n <= 6; ++n) {
      SCOPED_TRACE(std::string(std::strerror(err)) + ", n=" + std::to_string(n));
      const std::string name = "f" + std::to_string(err) + "-" + std::to_string(n);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file,
                           env_->NewWritableFile(Path(name), true));
      env_->FailOperation(n, err);
      const uint64_t start = env_->operation_count();
      const std::vector<std::function<Status()>> ops = {
          [&] { return file->Append("a"); },
          [&] { return file->Sync(); },
          [&] { return env_->CreateDir(Path(name + ".dir")); },
          [&] { return env_->SyncDir(root_); },
          [&] { return env_->RenameFile(Path(name), Path(name + ".renamed")); },
          [&] { return file->Close(); },
      };
      for (uint64_t i = 1; i <= ops.size(); ++i) {
        const Status s = ops[i - 1]();
        if (i == n) {
          EXPECT_EQ(s.code(), StatusCode::kIOError) << "op " << i;
          EXPECT_EQ(s.sys_errno(), err) << "op " << i;
          EXPECT_THAT(s.message(), HasSubstr("injected"));
          EXPECT_THAT(s.message(), HasSubstr(std::strerror(err)));
        } else {
          EXPECT_TRUE(s.ok()) << "op " << i << ": " << s.ToString();
        }
      }
      EXPECT_EQ(env_->operation_count() - start, ops.size());
      // The failed operation had no effect.
      EXPECT_EQ(base_->FileExists(Path(name + ".dir")).ok(), n != 3);
      EXPECT_EQ(base_->FileExists(Path(name + ".renamed")).ok(), n != 5);
    }
  }
}

TEST_P(FaultInjectionEnvTest, FailedAppendWritesHalfOfItsBytes) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(Path("f"), true));
  env_->FailOperation(1, ENOSPC);
  const std::string_view pieces[] = {"0123", "456789"};
  EXPECT_THAT(file->Append(pieces), StatusIs(StatusCode::kIOError));
  EXPECT_EQ(file->Size(), 5u);
  ASSERT_OK(file->Close());
  EXPECT_EQ(Contents("f"), "01234");
}

TEST_P(FaultInjectionEnvTest, WriteAtIsAnOperationAndItsBytesAreUnsynced) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(Path("f"), false));
  ASSERT_OK(env_->SyncDir(root_));
  ASSERT_OK(file->Append("synced|"));
  ASSERT_OK(file->Sync());
  ASSERT_OK(file->Append("0000|payload"));
  const uint64_t before = env_->operation_count();
  env_->FailOperation(1, EIO);
  EXPECT_THAT(file->WriteAt(7, "HEAD"), StatusIsWith(StatusCode::kIOError, "injected"));
  EXPECT_EQ(env_->operation_count(), before + 1);
  EXPECT_EQ(Contents("f"), "synced|0000|payload");  // a failed WriteAt does nothing
  ASSERT_OK(file->WriteAt(7, "HEAD"));
  EXPECT_EQ(Contents("f"), "synced|HEAD|payload");
  EXPECT_THAT(file->WriteAt(0, "x"), StatusIs(StatusCode::kInvalidArgument));
  PowerLoss();  // the rewrite was never synced: it goes with the rest of the tail
  EXPECT_EQ(Contents("f"), "synced|");
}

TEST_P(FaultInjectionEnvTest, FailedSyncMakesNothingDurableEvenAfterARetry) {
  WriteDurableName("f", "durable;");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(Path("g"), true));
  ASSERT_OK(env_->SyncDir(root_));
  ASSERT_OK(file->Append("lost"));
  env_->FailOperation(1, EIO);
  const Status failed = file->Sync();
  EXPECT_EQ(failed.sys_errno(), EIO);
  ASSERT_OK(file->Sync());  // as on Linux: the error was reported once
  ASSERT_OK(file->Close());
  PowerLoss();
  EXPECT_EQ(Contents("f"), "durable;");
  EXPECT_EQ(Contents("g"), "");
}

TEST_P(FaultInjectionEnvTest, CrashAfterMakesLaterOperationsFailAndDoNothing) {
  WriteDurableName("old", "old");
  env_->CrashAfter(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(Path("f"), true));
  ASSERT_OK(file->Append("before"));
  EXPECT_FALSE(env_->crashed());

  const Status append = file->Append("after");
  EXPECT_THAT(append, StatusIsWith(StatusCode::kIOError, "simulated crash"));
  EXPECT_EQ(append.sys_errno(), EIO);
  EXPECT_TRUE(env_->crashed());
  EXPECT_THAT(file->Sync(), StatusIs(StatusCode::kIOError));
  EXPECT_THAT(env_->CreateDir(Path("d")), StatusIs(StatusCode::kIOError));
  EXPECT_THAT(env_->RenameFile(Path("old"), Path("new")), StatusIs(StatusCode::kIOError));
  EXPECT_THAT(env_->RemoveFile(Path("old")), StatusIs(StatusCode::kIOError));
  EXPECT_THAT(env_->NewWritableFile(Path("g"), true).status(), StatusIs(StatusCode::kIOError));
  EXPECT_THAT(file->Close(), StatusIs(StatusCode::kIOError));

  EXPECT_EQ(Contents("f"), "before");
  EXPECT_EQ(Contents("old"), "old");
  EXPECT_EQ(Contents("new"), "<missing>");
  EXPECT_EQ(Contents("g"), "<missing>");
  EXPECT_THAT(base_->FileExists(Path("d")), StatusIs(StatusCode::kNotFound));
  // Reads still work after the crash.
  ASSERT_OK(env_->FileExists(Path("old")));
}

TEST_P(FaultInjectionEnvTest, PowerLossEndsTheCrashAndInvalidatesOldHandles) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> old_file,
                       env_->NewWritableFile(Path("f"), true));
  env_->CrashAfter(0);
  EXPECT_THAT(old_file->Append("x"), StatusIs(StatusCode::kIOError));
  EXPECT_TRUE(env_->crashed());
  PowerLoss();
  EXPECT_FALSE(env_->crashed());
  EXPECT_THAT(old_file->Append("x"), StatusIsWith(StatusCode::kIOError, "power loss"));
  WriteDurableName("g", "works again");
  EXPECT_EQ(Contents("g"), "works again");
}

TEST_P(FaultInjectionEnvTest, ResetCountersAfterACrashKeepsWhatTheOsAccepted) {
  env_->CrashAfter(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(Path("f"), true));
  ASSERT_OK(file->Append("accepted"));
  EXPECT_THAT(file->Append("refused"), StatusIs(StatusCode::kIOError));
  env_->ResetCounters();  // a killed process: the machine stays up
  EXPECT_FALSE(env_->crashed());
  EXPECT_EQ(env_->operation_count(), 0u);
  EXPECT_EQ(Contents("f"), "accepted");
  ASSERT_OK(file->Close());
  EXPECT_EQ(env_->operation_count(), 1u);
}

TEST_P(FaultInjectionEnvTest, ConcurrentWritersAreEachCountedAndTracked) {
  constexpr int kThreads = 4;
  constexpr int kAppends = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string path = Path("w" + std::to_string(t));
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, env_->NewWritableFile(path, true));
      for (int i = 0; i < kAppends; ++i) {
        ASSERT_OK(file->Append("x"));
        if (i == kAppends / 2 - 1) ASSERT_OK(file->Sync());
      }
      ASSERT_OK(file->Close());
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Per thread: open, appends, one sync, close.
  EXPECT_EQ(env_->operation_count(), uint64_t{kThreads} * (kAppends + 3));
  ASSERT_OK(env_->SyncDir(root_));
  PowerLoss();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(Contents("w" + std::to_string(t)), std::string(kAppends / 2, 'x'));
  }
}

TEST_P(FaultInjectionEnvTest, ReadsAreNotCounted) {
  WriteDurableName("f", "x");
  const uint64_t before = env_->operation_count();
  ASSERT_OK(env_->FileExists(Path("f")));
  ASSERT_OK(env_->IsDirectory(root_));
  ASSERT_OK(env_->GetChildren(root_));
  ASSERT_OK(env_->GetFileSize(Path("f")));
  ASSERT_OK(env_->CheckWritableDir(root_));
  ASSERT_OK(ReadFileToString(env_.get(), Path("f")));
  (void)env_->NowNanos();
  EXPECT_EQ(env_->operation_count(), before);
}

TEST_P(FaultInjectionEnvTest, KeepRandomPrefixKeepsBetweenSyncedAndFullLength) {
  const uint64_t seed = testing::TestSeed();
  const std::string synced(100, 's');
  std::string unsynced;
  for (int i = 0; i < 1000; ++i) unsynced.push_back(static_cast<char>('a' + i % 26));
  const std::string full = synced + unsynced;
  std::set<size_t> lengths;
  for (uint64_t i = 0; i < 50; ++i) {
    SCOPED_TRACE("SimulatePowerLoss seed " + std::to_string(seed + i));
    const std::string name = "f" + std::to_string(i);
    WriteDurableName(name, synced, unsynced);
    PowerLoss(DropMode::kKeepRandomPrefix, seed + i);
    const std::string got = Contents(name);
    EXPECT_GE(got.size(), synced.size());
    EXPECT_LE(got.size(), full.size());
    EXPECT_EQ(got, full.substr(0, got.size()));
    lengths.insert(got.size());
  }
  EXPECT_GT(lengths.size(), 1u) << "the prefix length does not vary with the seed";
}

TEST_P(FaultInjectionEnvTest, TornGarbageChangesOnlyUnsyncedBytes) {
  const uint64_t seed = testing::TestSeed();
  const std::string synced(64, 's');
  const std::string unsynced(4096, 'u');
  for (uint64_t i = 0; i < 50; ++i) {
    SCOPED_TRACE("SimulatePowerLoss seed " + std::to_string(seed + i));
    const std::string name = "f" + std::to_string(i);
    WriteDurableName(name, synced, unsynced);
    PowerLoss(DropMode::kTornGarbage, seed + i);
    const std::string got = Contents(name);
    ASSERT_GT(got.size(), synced.size());
    ASSERT_LE(got.size(), synced.size() + unsynced.size());
    EXPECT_EQ(got.substr(0, synced.size()), synced);
    // The damage is one contiguous range.
    const size_t first_bad = got.find_first_not_of('u', synced.size());
    if (first_bad != std::string::npos) {
      const size_t last_bad = got.find_last_not_of('u');
      EXPECT_GE(last_bad, first_bad);
    }
  }
}

TEST_P(FaultInjectionEnvTest, SimulatePowerLossIsDeterministicForASeed) {
  const uint64_t seed = testing::TestSeed();
  std::string first;
  for (int round = 0; round < 2; ++round) {
    WriteDurableName("f", "s", std::string(5000, 'u'));
    PowerLoss(DropMode::kTornGarbage, seed);
    if (round == 0) {
      first = Contents("f");
    } else {
      EXPECT_EQ(Contents("f"), first) << "seed " << seed;
    }
  }
}

// The publish protocol, broken at every operation: after the reboot the file
// holds the old contents or the new, never a mixture, and the new if the call
// returned OK.
TEST_P(FaultInjectionEnvTest, WriteFileAtomicallyIsAllOrNothingAtEveryCrashPoint) {
  const uint64_t seed = testing::TestSeed();
  const std::string path = Path("marker");
  const std::string old_contents = "old marker";
  const std::string new_contents(3000, 'n');
  ASSERT_OK(WriteFileAtomically(env_.get(), path, old_contents));
  for (const DropMode mode :
       {DropMode::kDropUnsynced, DropMode::kKeepRandomPrefix, DropMode::kTornGarbage}) {
    for (uint64_t n = 0;; ++n) {
      SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)) + ", crash after " +
                   std::to_string(n) + ", seed " + std::to_string(seed + n));
      ASSERT_LT(n, 100u) << "the protocol never finished";
      env_->CrashAfter(n);
      const Status s = WriteFileAtomically(env_.get(), path, new_contents);
      const bool crashed = env_->crashed();
      PowerLoss(mode, seed + n);
      const std::string got = Contents("marker");
      if (s.ok()) {
        EXPECT_EQ(got, new_contents);
      } else {
        EXPECT_TRUE(got == old_contents || got == new_contents) << "found: " << got;
      }
      if (!crashed) break;
      ASSERT_OK(WriteFileAtomically(env_.get(), path, old_contents));
    }
  }
}

}  // namespace
}  // namespace runstore
