#include "store/writer/block_queue.h"

#include <utility>

namespace runstore::writer {

bool BlockQueue::TrimPool() {
  while (!pool_.empty() && OverBudget()) {
    pooled_ -= pool_.back()->memory_bytes();
    pool_.pop_back();
  }
  return !OverBudget();
}

std::unique_ptr<format::BlockBuilder> BlockQueue::TakeBuilder(format::BlockSchema schema) {
  if (pool_.empty()) return std::make_unique<format::BlockBuilder>(std::move(schema));
  auto b = std::move(pool_.back());
  pool_.pop_back();
  pooled_ -= b->memory_bytes();
  buffered_ += b->memory_bytes();  // its capacity is in use again
  b->Reset(std::move(schema));
  return b;
}

void BlockQueue::PushBlock(std::unique_ptr<format::BlockBuilder> block) {
  Task t;
  t.kind = Task::kBlock;
  t.bytes = block->memory_bytes();  // counted in buffered_ as it grew
  t.block = std::move(block);
  queued_ += t.bytes;
  tasks_.push_back(std::move(t));
}

void BlockQueue::PushBorrowed(std::unique_ptr<format::BlockBuilder> block, uint64_t ticket) {
  Task t;
  t.kind = Task::kBlock;
  t.bytes = block->memory_bytes();  // the keys; the value stays the caller's
  t.block = std::move(block);
  t.ticket = ticket;
  t.borrowed = true;
  buffered_ += t.bytes;
  tasks_.push_back(std::move(t));
}

void BlockQueue::PushCommit(uint64_t ticket, bool sync) {
  Task t;
  t.kind = Task::kCommit;
  t.ticket = ticket;
  t.sync = sync;
  tasks_.push_back(std::move(t));
}

void BlockQueue::PushSeal() {
  Task t;
  t.kind = Task::kSeal;
  tasks_.push_back(std::move(t));
}

BlockQueue::Task BlockQueue::Pop() {
  Task t = std::move(tasks_.front());
  tasks_.pop_front();
  return t;
}

void BlockQueue::Done(Task* t) {
  if (t->kind != Task::kBlock) return;
  buffered_ -= t->bytes;
  if (t->borrowed) return;
  queued_ -= t->bytes;
  // Keep as many builders as a full queue holds, so that a writer kept
  // waiting by the disk reuses memory instead of faulting in new pages.
  const size_t n = t->block ? t->block->memory_bytes() : 0;
  if (t->block && buffered_ + pooled_ + n <= buffer_bytes_ && pooled_ + n <= QueueLimit()) {
    pooled_ += n;
    pool_.push_back(std::move(t->block));
  }
}

}  // namespace runstore::writer
