// Recovery of a segment that a writer is still appending to, or that it left
// behind when it crashed (docs/format.md "Recovery"). The input is a whole
// segment file (no fix-ups) followed by two bytes, a u16 that picks where
// the file is cut: LoadSegmentIndex reads the file cut there, the rest is
// appended, and RefreshSegmentIndex continues from what the first read
// accepted, as a reader of a running writer does. After each read, an index
// that was accepted must be one the store can rely on (fuzz_util.h
// CheckIndex), and every block it holds is checked, decoded and read record
// by record. A refresh applies the rules to what the file holds now
// (docs/format.md "Recovery"), so it must agree with a reader that opens
// the whole file afresh: the same status, and the same commits and blocks.
// Except after a cut that reads as sealed: a sealed segment never changes,
// so its refresh reads nothing (Store::Refresh), whatever was appended.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "format/segment_reader.h"
#include "fuzz_util.h"
#include "util/coding.h"

namespace runstore {
namespace {

constexpr char kFile[] = "segments/f-00000001.rss";

bool Accepted(const Status& s) {
  if (s.ok()) return true;
  RUNSTORE_FUZZ_CHECK(
      (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported) &&
          s.message().starts_with(kFile),
      s.ToString());
  return false;
}

bool SameIndex(const format::SegmentIndex& a, const format::SegmentIndex& b) {
  if (a.sealed != b.sealed || a.committed_end != b.committed_end ||
      a.commits.size() != b.commits.size() || a.blocks.size() != b.blocks.size()) {
    return false;
  }
  for (size_t i = 0; i < a.commits.size(); ++i) {
    if (a.commits[i].sequence != b.commits[i].sequence ||
        a.commits[i].time_ns != b.commits[i].time_ns ||
        a.commits[i].end_offset != b.commits[i].end_offset) {
      return false;
    }
  }
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    if (a.blocks[i].frame_offset != b.blocks[i].frame_offset ||
        a.blocks[i].commit_index != b.blocks[i].commit_index) {
      return false;
    }
  }
  return true;
}

std::string Describe(const format::SegmentIndex& x) {
  return std::string(x.sealed ? "sealed" : "unsealed") + ", " + std::to_string(x.commits.size()) +
         " commits, " + std::to_string(x.blocks.size()) + " blocks, committed end " +
         std::to_string(x.committed_end);
}

void Run(std::string_view in) {
  if (in.size() < 2) return;
  const std::string_view file_bytes = in.substr(0, in.size() - 2);
  const size_t cut = DecodeFixed<uint16_t>(in.data() + in.size() - 2) % (file_bytes.size() + 1);
  std::unique_ptr<Env> env = fuzzing::NewExactMemEnv();
  fuzzing::PutFile(env.get(), "/seg", file_bytes.substr(0, cut));
  auto file = env->NewRandomAccessFile("/seg");
  RUNSTORE_FUZZ_CHECK(file.ok(), file.status().ToString());
  format::SegmentIndex index;
  if (!Accepted(format::LoadSegmentIndex(**file, kFile, &index))) return;
  fuzzing::CheckIndex(index, cut, kFile);
  fuzzing::ReadBlocks(**file, index, kFile);

  // The writer appends the rest; the reader refreshes.
  fuzzing::PutFile(env.get(), "/seg", file_bytes);
  const bool was_sealed = index.sealed;
  const Status refreshed = format::RefreshSegmentIndex(**file, kFile, &index);
  if (was_sealed) {
    RUNSTORE_FUZZ_CHECK(refreshed.ok() && index.sealed, refreshed.ToString());
    return;
  }
  format::SegmentIndex fresh;
  const Status loaded = format::LoadSegmentIndex(**file, kFile, &fresh);
  RUNSTORE_FUZZ_CHECK(refreshed.code() == loaded.code(), "cut at " + std::to_string(cut) +
                                                             ": refresh: " + refreshed.ToString() +
                                                             "; fresh load: " + loaded.ToString());
  if (!Accepted(refreshed)) return;
  fuzzing::CheckIndex(index, file_bytes.size(), kFile);
  RUNSTORE_FUZZ_CHECK(SameIndex(index, fresh), "cut at " + std::to_string(cut) +
                                                   ": refresh gives " + Describe(index) +
                                                   ", a fresh load " + Describe(fresh));
  fuzzing::ReadBlocks(**file, index, kFile);
}

}  // namespace
}  // namespace runstore

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runstore::Run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
