// The catalog (docs/format.md "Catalog"): Catalog::Read of any bytes as a
// store's CATALOG file, then every entry it accepts replayed through
// LoadSegmentIndex, as opening a store does for an entry whose file matches.
// Input: `u8 flags`, then the file. Flag bit 0 recomputes the header's and
// the body's checksums first, so that the entries' parser is reached.
//
// Properties: Read fails only with Corruption or NotSupported naming the
// file, or succeeds; an accepted catalog written again reads back with the
// same entries; replaying an entry fails only with Corruption, NotFound (a
// read outside the recorded ranges) or NotSupported, and an index it gives
// ends inside the entry's file size.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/segment_reader.h"
#include "fuzz_util.h"
#include "runstore/env.h"
#include "store/catalog.h"
#include "util/coding.h"
#include "util/hash.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runstore;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((flags & 1) && file.size() >= 48) {
    EncodeFixed<uint64_t>(file.data() + 24, file.size() - 48);
    EncodeFixed<uint64_t>(file.data() + 32, Checksum(file.data() + 48, file.size() - 48));
    EncodeFixed<uint64_t>(file.data() + 40, Checksum(file.data(), 40));
  }
  auto env = NewMemEnv();
  RUNSTORE_FUZZ_CHECK(env->CreateDir("/s").ok(), "mkdir");
  {
    auto f = env->NewWritableFile("/s/CATALOG", true);
    RUNSTORE_FUZZ_CHECK(f.ok() && (*f)->Append(file).ok() && (*f)->Close().ok(), "write");
  }
  auto catalog = Catalog::Read(env.get(), "/s", UINT64_MAX);
  if (!catalog.ok()) {
    const Status& s = catalog.status();
    RUNSTORE_FUZZ_CHECK(
        s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported, s.ToString());
    RUNSTORE_FUZZ_CHECK(s.message().starts_with("/s/CATALOG"), s.ToString());
    return 0;
  }
  std::map<std::string, CatalogEntry> entries((*catalog)->entries().begin(),
                                              (*catalog)->entries().end());
  for (const auto& [name, e] : entries) {
    format::SegmentIndex index;
    const Status s = format::LoadSegmentIndex(*NewReplayFile(e.reads), name, &index);
    if (!s.ok()) {
      RUNSTORE_FUZZ_CHECK(s.code() == StatusCode::kCorruption ||
                              s.code() == StatusCode::kNotFound ||
                              s.code() == StatusCode::kNotSupported,
                          s.ToString());
      continue;
    }
    RUNSTORE_FUZZ_CHECK(index.committed_end <= e.reads->size, name);
    for (const auto& b : index.blocks) {
      RUNSTORE_FUZZ_CHECK(b.payload_offset + b.header.payload_len <= index.committed_end, name);
    }
    if (index.run_index) {
      RUNSTORE_FUZZ_CHECK(index.run_index->ends.size() == index.blocks.size(), name);
    }
  }
  // Written again, it reads back the same.
  RUNSTORE_FUZZ_CHECK(Catalog::Write(env.get(), "/s", entries).ok(), "rewrite");
  auto again = Catalog::Read(env.get(), "/s", UINT64_MAX);
  RUNSTORE_FUZZ_CHECK(again.ok(), again.status().ToString());
  RUNSTORE_FUZZ_CHECK((*again)->size() == entries.size(), "entry count");
  for (const auto& [name, e] : entries) {
    const CatalogEntry* a = (*again)->Find(name);
    RUNSTORE_FUZZ_CHECK(a && a->info == e.info && a->reads->size == e.reads->size &&
                            a->reads->ranges == e.reads->ranges,
                        name);
  }
  return 0;
}
