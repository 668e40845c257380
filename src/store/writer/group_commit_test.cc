// GroupCommit and BlockQueue, the writer's two small state machines, on their
// own: random sequences of what the writer's threads do to them, against a
// model of what must hold (docs/design.md#writer-threads).
#include "store/writer/group_commit.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "format/block.h"
#include "store/writer/block_queue.h"

namespace runstore::writer {
namespace {

// Commits are written with increasing tickets; syncs start, finish (or fail)
// and seals begin and end in any order the writer allows. What must hold:
// durability only grows, reaches a ticket only through a successful sync
// covering it, a seal, or a commit that needed none; a failed sync makes
// nothing durable; no sync starts while one runs or a seal is under way; a
// started sync covers the newest commit wanted; after a seal nothing of the
// sealed segment is pending.
TEST(GroupCommitTest, DurabilityOnlyFromWhatASyncOrASealCovered) {
  const uint64_t seed = 20261206;
  std::mt19937_64 rng(seed);
  format::SegmentWriter* segments[2] = {reinterpret_cast<format::SegmentWriter*>(0x10),
                                        reinterpret_cast<format::SegmentWriter*>(0x20)};
  int syncs = 0, failed = 0, seals = 0;
  for (int round = 0; round < 200; ++round) {
    GroupCommit gc;
    uint64_t ticket = 0;       // the last commit written
    uint64_t wanted = 0;       // the newest commit waiting for a sync
    uint64_t may_durable = 0;  // the most the model allows to be durable
    uint64_t taken = 0;        // the newest commit a sync or a seal took
    uint64_t length = 0;
    bool running = false, sealing = false, stopped = false;
    GroupCommit::Sync started;
    for (int step = 0; step < 300 && !stopped; ++step) {
      const uint64_t before = gc.durable();
      switch (rng() % 6) {
        case 0:
        case 1:  // a commit that needs a sync
          if (sealing) break;
          ++ticket;
          length += 1 + rng() % 1000;
          gc.Want(ticket, length, segments[ticket % 2]);
          wanted = ticket;
          break;
        case 2:  // a commit with nothing unsynced before it
          if (sealing || running || wanted > gc.durable()) break;
          ++ticket;
          gc.MarkDurable(ticket);
          may_durable = ticket;
          break;
        case 3:  // the sync thread takes the wanted sync
          ASSERT_EQ(gc.Pending(), !running && !sealing && wanted > taken)
              << "seed " << seed << ": pending is not what was wanted and not taken";
          if (!gc.Pending()) break;
          ASSERT_FALSE(running) << "seed " << seed;
          ASSERT_FALSE(sealing) << "seed " << seed;
          started = gc.Start();
          ASSERT_EQ(started.ticket, wanted) << "seed " << seed << ": not the newest commit";
          ASSERT_EQ(started.length, length) << "seed " << seed;
          ASSERT_EQ(started.segment, segments[wanted % 2]) << "seed " << seed;
          ASSERT_TRUE(gc.running());
          ASSERT_FALSE(gc.Pending()) << "seed " << seed << ": a second sync may start";
          running = true;
          taken = started.ticket;
          break;
        case 4:  // the running sync returns
          if (!running) break;
          if (rng() % 10 == 0) {
            gc.Finish(started, false);
            ++failed;
            stopped = true;  // the writer stops after a failed sync
            ASSERT_EQ(gc.durable(), before) << "seed " << seed << ": a failed sync made durable";
          } else {
            gc.Finish(started, true);
            ++syncs;
            may_durable = std::max(may_durable, started.ticket);
            ASSERT_GE(gc.durable(), started.ticket) << "seed " << seed;
          }
          running = false;
          break;
        case 5:  // a seal (it waits for a running sync first)
          if (running || sealing) break;
          gc.BeginSeal();
          ASSERT_FALSE(gc.Pending()) << "seed " << seed << ": a sync may start under a seal";
          if (rng() % 10 == 0) {
            gc.EndSeal(false, ticket);
            stopped = true;
            ASSERT_EQ(gc.durable(), before) << "seed " << seed << ": a failed seal made durable";
          } else {
            gc.EndSeal(true, ticket);
            may_durable = ticket;
            taken = wanted;
            ++seals;
            ASSERT_EQ(gc.durable(), ticket) << "seed " << seed;
            ASSERT_FALSE(gc.Pending())
                << "seed " << seed << ": the sealed segment's syncs are moot";
          }
          break;
      }
      ASSERT_GE(gc.durable(), before) << "seed " << seed << ": durability went back";
      ASSERT_LE(gc.durable(), may_durable) << "seed " << seed << ": durable beyond what was synced";
      ASSERT_LE(gc.durable(), ticket) << "seed " << seed;
    }
  }
  std::printf("group commit: seed %llu, %d syncs, %d failed, %d seals\n",
              static_cast<unsigned long long>(seed), syncs, failed, seals);
  EXPECT_GT(syncs, 500);
  EXPECT_GT(failed, 10);
  EXPECT_GT(seals, 100);
}

format::BlockSchema Float64Schema() {
  format::BlockSchema s;
  s.name = "x";
  s.dtype = DType::kFloat64;
  return s;
}

// A block builder that holds about `records` float64 records.
std::unique_ptr<format::BlockBuilder> Filled(BlockQueue* q, int records) {
  auto b = q->TakeBuilder(Float64Schema());
  const size_t before = b->memory_bytes();
  for (int i = 0; i < records; ++i) {
    const double v = i;
    b->Add(RunRef(int64_t{1}), i, ValueRef::Scalar(v));
  }
  q->Grew(b->memory_bytes() - before);
  return b;
}

// The memory a queue accounts for is what its builders hold, whatever the
// tasks do: given back when a task is done, kept in the pool only within the
// budget and the queue's limit, and the pool given up first when over
// budget; tasks come out in the order they went in.
TEST(BlockQueueTest, MemoryIsWhatTheBuildersHoldAndTasksKeepTheirOrder) {
  const size_t budget = 1 << 20, block = 64 << 10;
  BlockQueue q(budget, block);
  EXPECT_EQ(q.QueueLimit(), std::max<size_t>(4 * block, budget / 8));
  size_t expect_buffered = 0;
  std::vector<uint64_t> order;
  for (uint64_t ticket = 1; ticket <= 6; ++ticket) {
    auto b = Filled(&q, 2000);
    expect_buffered += b->memory_bytes();
    q.PushBlock(std::move(b));
    q.PushCommit(ticket, ticket % 2 == 0);
  }
  q.PushSeal();
  EXPECT_EQ(q.buffered(), expect_buffered);
  EXPECT_EQ(q.queued(), expect_buffered);
  EXPECT_TRUE(q.QueueFull()) << "six blocks of 32 KiB are past the queue's limit of "
                             << q.QueueLimit();
  int blocks = 0;
  while (!q.empty()) {
    BlockQueue::Task t = q.Pop();
    if (t.kind == BlockQueue::Task::kCommit) {
      order.push_back(t.ticket);
      EXPECT_EQ(t.sync, t.ticket % 2 == 0);
    } else if (t.kind == BlockQueue::Task::kBlock) {
      ++blocks;
      EXPECT_EQ(order.size() + 1, static_cast<size_t>(blocks)) << "a block after its commit";
    } else {
      EXPECT_EQ(order.size(), 6u) << "the seal before a commit";
    }
    q.Done(&t);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(q.buffered(), 0u) << "memory not given back";
  EXPECT_EQ(q.queued(), 0u);
  // The done blocks' builders are pooled up to the queue's limit, and a
  // builder taken from the pool counts again.
  auto reused = q.TakeBuilder(Float64Schema());
  EXPECT_GT(reused->memory_bytes(), 0u) << "a builder from the pool keeps its capacity";
  EXPECT_EQ(q.buffered(), reused->memory_bytes());
  EXPECT_TRUE(q.TrimPool());
  // Over the budget, the pool is given up first.
  q.Grew(budget);
  EXPECT_TRUE(q.OverBudget());
  EXPECT_FALSE(q.TrimPool()) << "trimming the pool cannot bring a full budget back";
  q.PushBlock(std::move(reused));
  BlockQueue::Task t = q.Pop();
  q.Done(&t);
  EXPECT_EQ(q.buffered(), budget) << "the builder given back, not pooled past the budget";

  // A borrowed block (a large value written from the caller's memory) counts
  // its keys until done, does not fill the queue, and is never pooled.
  BlockQueue q2(budget, block);
  auto b = q2.TakeBuilder(Float64Schema());
  const std::vector<double> large(1 << 17, 1.0);
  const int64_t shape[] = {1 << 17};
  format::BlockSchema array = Float64Schema();
  array.dims = {1 << 17};
  b->Reset(array);
  b->AddBorrowed(RunRef(int64_t{1}), 0, ValueRef::Array(large.data(), shape));
  const size_t keys = b->memory_bytes();
  EXPECT_LT(keys, large.size() * sizeof(double) / 8) << "the value is not copied";
  q2.PushBorrowed(std::move(b), 7);
  EXPECT_EQ(q2.buffered(), keys);
  EXPECT_EQ(q2.queued(), 0u) << "a borrowed block does not fill the queue";
  BlockQueue::Task bt = q2.Pop();
  EXPECT_TRUE(bt.borrowed);
  EXPECT_EQ(bt.ticket, 7u);
  q2.Done(&bt);
  EXPECT_EQ(q2.buffered(), 0u);
  EXPECT_NE(bt.block, nullptr) << "a borrowed block's builder is not pooled";
}

}  // namespace
}  // namespace runstore::writer
