// The store marker (docs/format.md "The store directory"): DecodeStoreMarker
// on any bytes. A marker that decodes names a version this build reads, and
// that version's own marker decodes to it; one that does not is Corruption
// or NotSupported naming the file, in a message of bounded length whatever
// the input holds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runstore;
  constexpr char kFile[] = "/s/RUNSTORE";
  const fuzzing::ExactBytes in(std::string_view(reinterpret_cast<const char*>(data), size));
  uint32_t version = 0;
  const Status s = format::DecodeStoreMarker(in.view(), kFile, &version);
  if (!s.ok()) {
    RUNSTORE_FUZZ_CHECK(
        s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported, s.ToString());
    RUNSTORE_FUZZ_CHECK(s.message().starts_with(kFile), s.ToString());
    RUNSTORE_FUZZ_CHECK(s.message().size() < 256, s.ToString());
    return 0;
  }
  RUNSTORE_FUZZ_CHECK(version >= 1 && version <= format::kSegmentFormatVersion,
                      std::to_string(version));
  uint32_t again = 0;
  RUNSTORE_FUZZ_CHECK(
      format::DecodeStoreMarker(format::EncodeStoreMarker(version), kFile, &again).ok() &&
          again == version,
      std::to_string(version));
  return 0;
}
