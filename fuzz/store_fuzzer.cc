// A whole store (docs/format.md "The store directory"), read through the
// public API. The input is
//
//   u8 flags     bit 0: recompute every checksum of the segments
//                (fuzz_util.h FixChecksums), so that mutations reach what
//                lies behind them; bit 1: a second segment; bit 2: it is of
//                the same writer as the first (f-00000002.rss) rather than
//                of another (g-00000001.rss); bit 3: the last segment grows
//                while the store is open; bit 4, without bit 3: it shrinks
//                instead (damage behind its end)
//   u32 cut      with bit 3, where the last segment is cut at first; with
//                bit 4, where it is cut later
//   u16 n, then n bytes   the RUNSTORE marker
//   u32 n, then n bytes   the first segment, /s/segments/f-00000001.rss
//   the rest     the second segment, with bit 1
//
// Store::Open (read-only, in an in-memory Env) and then everything a reader
// can ask (fuzz_util.h ReadSnapshot); with bit 3, the rest of the last
// segment is then appended (or, with bit 4, cut off), the store refreshed,
// and both the old and the new snapshot read again. Opening and refreshing
// may fail with Corruption or NotSupported naming the file, reads with
// NotFound or Corruption (fuzz_util.h CheckOpenStatus, ReadSnapshot);
// nothing may crash, hang, leak or allocate without bound, and every value
// read must be what its shape says.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"

namespace runstore {
namespace {

constexpr char kStore[] = "/s";

void Run(const uint8_t* data, size_t size) {
  fuzzing::InputReader in(data, size);
  const uint8_t flags = in.Get<uint8_t>();
  const uint32_t cut = in.Get<uint32_t>();
  const std::string_view marker = in.Take(in.Get<uint16_t>());
  std::vector<std::string> segments;
  segments.emplace_back(in.Take(in.Get<uint32_t>()));
  if (flags & 2) segments.emplace_back(in.Rest());
  if (flags & 1) {
    for (std::string& s : segments) fuzzing::FixChecksums(&s);
  }
  const std::string names[] = {"f-00000001.rss", (flags & 4) ? "f-00000002.rss" : "g-00000001.rss"};
  const bool grow = flags & 8;
  const bool shrink = !grow && (flags & 16);

  std::unique_ptr<Env> env = fuzzing::NewExactMemEnv();
  fuzzing::MakeStoreDir(env.get(), kStore, marker);
  const std::string dir = std::string(kStore) + "/segments/";
  for (size_t i = 0; i < segments.size(); ++i) {
    std::string_view bytes = segments[i];
    if (grow && i + 1 == segments.size()) bytes = bytes.substr(0, cut % (bytes.size() + 1));
    fuzzing::PutFile(env.get(), dir + names[i], bytes);
  }
  std::unique_ptr<Store> store = fuzzing::OpenReadOnly(env.get(), kStore);
  if (!store) return;
  std::shared_ptr<const Snapshot> before = store->GetSnapshot();
  fuzzing::ReadSnapshot(*before);
  if (!grow && !shrink) return;
  const std::string& last = segments.back();
  fuzzing::PutFile(
      env.get(), dir + names[segments.size() - 1],
      grow ? std::string_view(last) : std::string_view(last).substr(0, cut % (last.size() + 1)));
  auto after = store->Refresh();
  fuzzing::CheckOpenStatus(after.status(), kStore);
  if (!after.ok()) return;
  fuzzing::ReadSnapshot(**after);
  fuzzing::ReadSnapshot(*before);
}

}  // namespace
}  // namespace runstore

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runstore::Run(data, size);
  return 0;
}
