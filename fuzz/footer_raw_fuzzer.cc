// A whole segment file as it is, without fix-ups: the input is the file.
// LoadSegmentIndex reads a sealed one through its trailer and footer (and
// falls back to recovery when they are damaged), an unsealed one by
// recovery; an index it accepts must be one the store can rely on
// (fuzz_util.h CheckIndex), and every block of it is read as the store reads
// it. The seeds are sealed segments, so mutations land in trailers and
// footers first.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "format/segment_reader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runstore;
  constexpr char kFile[] = "segments/f-00000001.rss";
  std::unique_ptr<Env> env = fuzzing::NewExactMemEnv();
  fuzzing::PutFile(env.get(), "/seg", std::string_view(reinterpret_cast<const char*>(data), size));
  auto file = env->NewRandomAccessFile("/seg");
  RUNSTORE_FUZZ_CHECK(file.ok(), file.status().ToString());
  format::SegmentIndex index;
  const Status s = format::LoadSegmentIndex(**file, kFile, &index);
  if (!s.ok()) {
    RUNSTORE_FUZZ_CHECK(
        (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported) &&
            s.message().starts_with(kFile),
        s.ToString());
    return 0;
  }
  fuzzing::CheckIndex(index, size, kFile);
  fuzzing::ReadBlocks(**file, index, kFile);
  return 0;
}
