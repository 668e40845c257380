// The deterministic record pattern shared by tests/programs/kill9_writer.cc
// (which writes it) and tests/kill9_test.cc (which checks it): every record,
// and every commit boundary, is a function of (writer index, life, seq), so
// the supervisor can tell from a key alone what its value must be, which
// series it belongs to, and where the commits that hold it begin and end.
#ifndef RUNSTORE_TESTS_PROGRAMS_KILL9_PATTERN_H_
#define RUNSTORE_TESTS_PROGRAMS_KILL9_PATTERN_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kill9 {

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
inline uint64_t Mix3(uint64_t a, uint64_t b, uint64_t c) { return Mix(Mix(Mix(a) ^ b) ^ c); }

enum class Kind { kScalar, kVector, kText, kBig };

// Series names and their dtypes: float64 scalar, float32[8], string, and a
// float64[32768] array of 256 KiB (written as a large value).
inline const char* NameOf(Kind k) {
  switch (k) {
    case Kind::kScalar:
      return "scalar";
    case Kind::kVector:
      return "vector";
    case Kind::kText:
      return "text";
    case Kind::kBig:
      return "big";
  }
  return "?";
}
inline std::optional<Kind> KindOfName(std::string_view name) {
  for (Kind k : {Kind::kScalar, Kind::kVector, Kind::kText, Kind::kBig}) {
    if (name == NameOf(k)) return k;
  }
  return std::nullopt;
}
inline constexpr int64_t kVectorLength = 8;
inline constexpr int64_t kBigLength = 32768;

// The series of record `seq` of life `life` of writer `index`.
inline Kind KindOf(int index, int life, int64_t seq) {
  const uint64_t h =
      Mix3(static_cast<uint64_t>(index), static_cast<uint64_t>(life), static_cast<uint64_t>(seq)) %
      1000;
  if (h < 3) return Kind::kBig;
  if (h < 300) return Kind::kText;
  if (h < 600) return Kind::kVector;
  return Kind::kScalar;
}

// True if the writer commits right after record `seq` (about one in five).
inline bool CommitsAfter(int index, int life, int64_t seq) {
  return Mix3(static_cast<uint64_t>(index) + 7777, static_cast<uint64_t>(life),
              static_cast<uint64_t>(seq)) %
             5 ==
         0;
}

// True if that commit is a Writer::Flush instead (about half of them): a
// kill -9 must not lose a flush either.
inline bool FlushesInstead(int index, int life, int64_t seq) {
  return Mix3(static_cast<uint64_t>(index) + 4242, static_cast<uint64_t>(life),
              static_cast<uint64_t>(seq)) %
             2 ==
         0;
}

// Run ids: unique per (writer, life). Numeric series use an integer run;
// the text series a string run, so both run kinds are exercised.
inline int64_t IntRun(int index, int life) { return int64_t{index} * 1000000 + life; }
inline std::string StringRun(int index, int life) {
  return "w" + std::to_string(index) + "-l" + std::to_string(life);
}
// Resuming writers (KILL9_RESUME_AT) write every series of every life into
// one integer run per index, as a training run restarted from checkpoints
// does: each life after the first begins with Writer::Resume(run, c) at a
// step c its previous lives acknowledged, hiding what they wrote from c on,
// and writes steps c, c + 1, ... with the values of its own (index, life).
inline constexpr int64_t kResumingRunBase = int64_t{1} << 40;
inline int64_t ResumingRun(int index) { return kResumingRunBase + index; }
inline bool ParseResumingRun(int64_t run, int* index) {
  if (run < kResumingRunBase || run >= kResumingRunBase + 1000000) return false;
  *index = static_cast<int>(run - kResumingRunBase);
  return true;
}

// Parses a run back into (index, life); false if it is not one of ours (a
// resuming run is not: it holds several lives).
inline bool ParseIntRun(int64_t run, int* index, int* life) {
  if (run < 0 || run >= kResumingRunBase) return false;
  *index = static_cast<int>(run / 1000000);
  *life = static_cast<int>(run % 1000000);
  return true;
}
inline bool ParseStringRun(std::string_view run, int* index, int* life) {
  if (run.size() < 4 || run[0] != 'w') return false;
  const size_t dash = run.find("-l");
  if (dash == std::string_view::npos || dash < 2) return false;
  try {
    *index = std::stoi(std::string(run.substr(1, dash - 1)));
    *life = std::stoi(std::string(run.substr(dash + 2)));
  } catch (...) {
    return false;
  }
  return StringRun(*index, *life) == run;
}

// The value bytes of the record: derived from the key alone.
inline std::string ValueBytes(Kind kind, int index, int life, int64_t seq) {
  uint64_t h = Mix3(static_cast<uint64_t>(IntRun(index, life)), static_cast<uint64_t>(kind) + 1,
                    static_cast<uint64_t>(seq));
  auto next_double = [&h] {
    h = Mix(h);
    return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
  };
  std::string out;
  switch (kind) {
    case Kind::kScalar: {
      const double d = next_double();
      out.assign(reinterpret_cast<const char*>(&d), sizeof d);
      break;
    }
    case Kind::kVector: {
      float v[kVectorLength];
      for (float& f : v) f = static_cast<float>(next_double());
      out.assign(reinterpret_cast<const char*>(v), sizeof v);
      break;
    }
    case Kind::kText: {
      const size_t len = 1 + (Mix(h) % 60);
      out = "w" + std::to_string(index) + "/" + std::to_string(life) + "/" + std::to_string(seq) +
            ":";
      while (out.size() < len + 16) out += static_cast<char>('a' + (Mix(h + out.size()) % 26));
      break;
    }
    case Kind::kBig: {
      std::vector<double> v(kBigLength);
      for (double& d : v) d = next_double();
      out.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
      break;
    }
  }
  return out;
}

}  // namespace kill9

#endif  // RUNSTORE_TESTS_PROGRAMS_KILL9_PATTERN_H_
