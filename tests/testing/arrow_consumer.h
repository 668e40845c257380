// A consumer of the Arrow C streams of include/runstore/arrow.h, for tests:
// takes the schema and every batch as a library speaking the Arrow C stream
// interface would.
#ifndef RUNSTORE_TESTS_TESTING_ARROW_CONSUMER_H_
#define RUNSTORE_TESTS_TESTING_ARROW_CONSUMER_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runstore/arrow.h"

namespace runstore::testing {

// What a consumer got of a stream: the schema's formats and names (children
// of the struct), and every batch.
struct Consumed {
  std::vector<std::string> formats, names;
  std::vector<std::string> child_formats;  // of list and fixed_size_list children
  std::string value_metadata;
  std::vector<ArrowArray> batches;
  ~Consumed() {
    for (ArrowArray& a : batches) {
      if (a.release) a.release(&a);
    }
  }
};

inline void Consume(ArrowArrayStream* s, Consumed* c) {
  ArrowSchema schema;
  ASSERT_EQ(s->get_schema(s, &schema), 0);
  ASSERT_STREQ(schema.format, "+s");
  for (int64_t i = 0; i < schema.n_children; ++i) {
    const ArrowSchema* f = schema.children[i];
    c->formats.push_back(f->format);
    c->names.push_back(f->name);
    c->child_formats.push_back(f->n_children ? f->children[0]->format : "");
    if (std::string(f->name) == "value" && f->metadata) {
      int32_t klen, vlen;
      std::memcpy(&klen, f->metadata + 4, 4);
      std::memcpy(&vlen, f->metadata + 8 + klen, 4);
      c->value_metadata =
          std::string(f->metadata + 8, klen) + "=" + std::string(f->metadata + 12 + klen, vlen);
    }
  }
  schema.release(&schema);
  EXPECT_EQ(schema.release, nullptr);
  while (true) {
    ArrowArray a;
    ASSERT_EQ(s->get_next(s, &a), 0) << s->get_last_error(s);
    if (a.release == nullptr) break;
    c->batches.push_back(a);
  }
}

inline int64_t Int(const ArrowArray* a, int64_t i) {
  return static_cast<const int64_t*>(a->buffers[1])[a->offset + i];
}
inline std::string Str(const ArrowArray* a, int64_t i) {
  const auto* off = static_cast<const int64_t*>(a->buffers[1]);
  return std::string(static_cast<const char*>(a->buffers[2]) + off[i], off[i + 1] - off[i]);
}

// Whether record i of `a` is not null.
inline bool Valid(const ArrowArray* a, int64_t i) {
  if (a->null_count == 0 || a->buffers[0] == nullptr) return true;
  const auto* bits = static_cast<const uint8_t*>(a->buffers[0]);
  return (bits[(a->offset + i) / 8] >> ((a->offset + i) % 8)) & 1;
}

}  // namespace runstore::testing

#endif  // RUNSTORE_TESTS_TESTING_ARROW_CONSUMER_H_
