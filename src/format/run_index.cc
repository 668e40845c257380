#include "format/run_index.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <functional>

#include "util/coding.h"
#include "util/hash.h"

namespace runstore::format {

void RunIndexBuilder::Add(std::span<const uint64_t> hashes) {
  assert(std::adjacent_find(hashes.begin(), hashes.end(), std::greater_equal<>()) == hashes.end());
  if (hashes.empty()) {
    index_.list_of.push_back(0);
    return;
  }
  const uint64_t content = Checksum(hashes.data(), hashes.size_bytes());
  auto [it, added] = by_content_.try_emplace(content, 0);
  if (!added) {
    const auto held = index_.List(it->second);
    if (std::equal(held.begin(), held.end(), hashes.begin(), hashes.end())) {
      index_.list_of.push_back(it->second);
      return;
    }
  }
  index_.hashes.insert(index_.hashes.end(), hashes.begin(), hashes.end());
  index_.ends.push_back(index_.hashes.size());
  const auto k = static_cast<uint32_t>(index_.ends.size());
  if (added) it->second = k;
  index_.list_of.push_back(k);
}

RunIndex RunIndexBuilder::Take() {
  by_content_.clear();
  RunIndex out = std::move(index_);
  index_ = RunIndex();
  out.hashes.shrink_to_fit();
  return out;
}

uint64_t SharedRunIndexSize(const RunIndex& index) {
  return 8 * (2 + index.block_count() + index.list_count() + index.hashes.size());
}

void AppendSharedRunIndex(const RunIndex& index, std::string* dst) {
  PutFixed<uint64_t>(dst, index.block_count());
  PutFixed<uint64_t>(dst, index.list_count());
  for (uint32_t k : index.list_of) PutFixed<uint64_t>(dst, k);
  PutFixedArray(dst, std::span<const uint64_t>(index.ends));
  PutFixedArray(dst, std::span<const uint64_t>(index.hashes));
}

namespace {

// Reads `n` u64 hashes that follow in `d` into `out` (the caller checked
// that `d` holds them) and whether they strictly ascend.
bool GetAscending(Decoder* d, uint64_t n, std::vector<uint64_t>* out) {
  out->resize(n);
  std::string_view bytes;
  d->GetBytes(8 * n, &bytes);
  if (n > 0) std::memcpy(out->data(), bytes.data(), bytes.size());
  return std::adjacent_find(out->begin(), out->end(), std::greater_equal<>()) == out->end();
}

}  // namespace

bool DecodeRunIndex(std::string_view bytes, uint64_t blocks, RunIndex* index, std::string* error) {
  Decoder d(bytes);
  uint64_t n;
  if (!d.Get(&n) || n != blocks) {
    *error = "run index is for a different number of blocks than the footer's";
    return false;
  }
  if (d.remaining() / 8 < n) {
    *error = "run index is shorter than its block table";
    return false;
  }
  std::vector<uint64_t> ends(n);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    d.Get(&ends[i]);
    if (ends[i] < prev) {
      *error = "run index block table is not ascending at block " + std::to_string(i);
      return false;
    }
    prev = ends[i];
  }
  if (d.remaining() % 8 != 0 || d.remaining() / 8 != prev) {
    *error = "run index holds " + std::to_string(d.remaining()) + " bytes of hashes for " +
             std::to_string(prev) + " entries";
    return false;
  }
  RunIndexBuilder builder;
  std::vector<uint64_t> list;
  for (uint64_t b = 0, lo = 0; b < n; lo = ends[b++]) {
    if (!GetAscending(&d, ends[b] - lo, &list)) {
      *error = "run index hashes of block " + std::to_string(b) + " are not ascending";
      return false;
    }
    builder.Add(list);
  }
  *index = builder.Take();
  return true;
}

bool DecodeSharedRunIndex(std::string_view bytes, uint64_t blocks, RunIndex* index,
                          std::string* error) {
  Decoder d(bytes);
  uint64_t n, lists;
  if (!d.Get(&n) || n != blocks) {
    *error = "shared run index is for a different number of blocks than the footer's";
    return false;
  }
  if (!d.Get(&lists) || d.remaining() / 8 < n || (d.remaining() / 8 - n) < lists) {
    *error = "shared run index is shorter than its block and list tables";
    return false;
  }
  RunIndex ri;
  ri.list_of.resize(n);
  // Lists are numbered in the order blocks first name them: each block names
  // a list named before or the next one, so every list is some block's.
  uint64_t named = 0;
  for (uint64_t b = 0; b < n; ++b) {
    uint64_t k = 0;
    d.Get(&k);
    if (k > named + 1 || k > lists) {
      *error = "shared run index names list " + std::to_string(k) + " for block " +
               std::to_string(b) + " where at most list " + std::to_string(named + 1) + " may be";
      return false;
    }
    named = std::max(named, k);
    ri.list_of[b] = static_cast<uint32_t>(k);
  }
  if (named != lists) {
    *error = "shared run index holds " + std::to_string(lists) + " lists and its blocks name " +
             std::to_string(named);
    return false;
  }
  ri.ends.resize(lists);
  uint64_t prev = 0;
  for (uint64_t k = 0; k < lists; ++k) {
    d.Get(&ri.ends[k]);
    if (ri.ends[k] <= prev) {
      *error = "shared run index list " + std::to_string(k + 1) + " is empty or ends before " +
               "the one before it";
      return false;
    }
    prev = ri.ends[k];
  }
  if (d.remaining() % 8 != 0 || d.remaining() / 8 != prev) {
    *error = "shared run index holds " + std::to_string(d.remaining()) + " bytes of hashes for " +
             std::to_string(prev) + " entries";
    return false;
  }
  if (!GetAscending(&d, prev, &ri.hashes)) {
    // Ascending overall is not required, only within each list: find which.
    for (uint32_t k = 1; k <= lists; ++k) {
      const auto l = ri.List(k);
      if (std::adjacent_find(l.begin(), l.end(), std::greater_equal<>()) != l.end()) {
        *error = "shared run index hashes of list " + std::to_string(k) + " are not ascending";
        return false;
      }
    }
  }
  *index = std::move(ri);
  return true;
}

}  // namespace runstore::format
