// The writer's queue of work for the thread that owns the open segment
// (docs/design.md#writer-threads): finished blocks, commits and seals, in the
// order the callers made them; the accounting of the memory the writer holds
// (WriterOptions::buffer_bytes, docs/design.md#invariant-1); and a pool of
// block builders to reuse.
//
// Not thread-safe: the writer uses it with its mutex held.
#ifndef RUNSTORE_STORE_WRITER_BLOCK_QUEUE_H_
#define RUNSTORE_STORE_WRITER_BLOCK_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "format/block.h"

namespace runstore::writer {

class BlockQueue {
 public:
  struct Task {
    enum Kind { kBlock, kCommit, kSeal } kind = kBlock;
    std::unique_ptr<format::BlockBuilder> block;
    uint64_t ticket = 0;    // a commit's ticket, or a borrowed block's
    size_t bytes = 0;       // of the writer's memory, given back when the task is done
    bool borrowed = false;  // a large value written from the caller's memory
    bool sync = true;       // kCommit: a Commit (synced), or a Flush (not)
  };

  // `buffer_bytes` bounds the memory; blocks are about `block_bytes` each.
  BlockQueue(size_t buffer_bytes, size_t block_bytes)
      : buffer_bytes_(buffer_bytes), block_bytes_(block_bytes) {}

  // Memory. Builders being filled count as they grow (Grew); finished blocks
  // count until their task is done; pooled builders count separately, as a
  // cache that gives its memory back first.
  void Grew(size_t bytes) { buffered_ += bytes; }
  size_t buffered() const { return buffered_; }
  size_t queued() const { return queued_; }
  // Past this many bytes of finished blocks waiting, appenders wait: the
  // thread that writes them stays busy with a few queued, and a deeper
  // queue only costs memory (fresh pages to fault in).
  size_t QueueLimit() const { return std::max<size_t>(4 * block_bytes_, buffer_bytes_ / 8); }
  bool QueueFull() const { return queued_ > QueueLimit(); }
  bool OverBudget() const { return buffered_ + pooled_ > buffer_bytes_; }
  // Drops pooled builders until the budget holds or the pool is empty; true
  // if the budget holds.
  bool TrimPool();

  // A builder for `schema`: one from the pool, its capacity in use again,
  // or a new one.
  std::unique_ptr<format::BlockBuilder> TakeBuilder(format::BlockSchema schema);

  // Queues a filled block (whose memory was counted as it grew).
  void PushBlock(std::unique_ptr<format::BlockBuilder> block);
  // Queues a block of one large value written from the caller's memory; the
  // caller waits for `ticket`'s task to be done before it may free it.
  void PushBorrowed(std::unique_ptr<format::BlockBuilder> block, uint64_t ticket);
  void PushCommit(uint64_t ticket, bool sync);
  void PushSeal();

  bool empty() const { return tasks_.empty(); }
  Task Pop();
  // After a task ran: gives back its memory, keeping its builder in the pool
  // when there is room.
  void Done(Task* task);

 private:
  const size_t buffer_bytes_;
  const size_t block_bytes_;
  std::deque<Task> tasks_;
  size_t buffered_ = 0;  // builders being filled and blocks queued
  size_t queued_ = 0;    // of which, finished blocks in tasks_ (not borrowed ones)
  size_t pooled_ = 0;    // builders in pool_
  std::vector<std::unique_ptr<format::BlockBuilder>> pool_;
};

}  // namespace runstore::writer

#endif  // RUNSTORE_STORE_WRITER_BLOCK_QUEUE_H_
