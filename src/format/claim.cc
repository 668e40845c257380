#include "format/claim.h"

#include <cstring>

#include "util/coding.h"
#include "util/hash.h"

namespace runstore::format {
namespace {

// The token's 16 hex digits as 8 bytes; false if it is not such a token.
bool TokenToBytes(std::string_view token, char out[8]) {
  if (token.size() != 16) return false;
  for (size_t i = 0; i < 16; i += 2) {
    int v = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = token[j];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else {
        return false;
      }
      v = v * 16 + d;
    }
    out[i / 2] = static_cast<char>(v);
  }
  return true;
}

std::string BytesToToken(const char* b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string t(16, '0');
  for (size_t i = 0; i < 8; ++i) {
    const auto v = static_cast<unsigned char>(b[i]);
    t[2 * i] = kHex[v >> 4];
    t[2 * i + 1] = kHex[v & 15];
  }
  return t;
}

}  // namespace

std::string EncodeClaim(const SegmentClaim& claim, std::string_view file_name) {
  std::string out(kClaimMagic, sizeof(kClaimMagic));
  PutFixed<int64_t>(&out, claim.not_before_ns);
  char token[8] = {};
  (void)TokenToBytes(claim.owner_token, token);  // callers pass NewOwnerToken()s
  out.append(token, sizeof(token));
  PutFixed<uint64_t>(&out, Checksum(file_name));
  PutFixed<uint64_t>(&out, Checksum(out));
  return out;
}

std::optional<SegmentClaim> DecodeClaim(std::string_view bytes, std::string_view file_name) {
  if (bytes.size() != kClaimSize) return std::nullopt;
  if (std::memcmp(bytes.data(), kClaimMagic, sizeof(kClaimMagic)) != 0) return std::nullopt;
  if (DecodeFixed<uint64_t>(bytes.data() + 32) != Checksum(bytes.substr(0, 32))) {
    return std::nullopt;
  }
  if (DecodeFixed<uint64_t>(bytes.data() + 24) != Checksum(file_name)) return std::nullopt;
  SegmentClaim claim;
  claim.not_before_ns = DecodeFixed<int64_t>(bytes.data() + 8);
  claim.owner_token = BytesToToken(bytes.data() + 16);
  return claim;
}

}  // namespace runstore::format
