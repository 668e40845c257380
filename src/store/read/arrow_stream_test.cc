// SeriesArrowStream: every type a series can hold, read through the Arrow C
// stream interface as a consumer reads it (schema, then batches until a
// released array), checked record by record against a scan; batches bounded;
// uncompressed values handed over without a copy; batches that outlive the
// stream and the store; filters; and errors.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runstore/arrow.h"
#include "runstore/store.h"
#include "store/read/snapshot.h"
#include "testing/arrow_consumer.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::Consume;
using ::runstore::testing::Consumed;
using ::runstore::testing::HashedId;
using ::runstore::testing::Int;
using ::runstore::testing::Str;
using ::runstore::testing::TempDir;

class ArrowStreamTest : public ::testing::Test {
 protected:
  std::string Path() const { return dir_.path() + "/s"; }
  TempDir dir_;
};

TEST_F(ArrowStreamTest, EveryTypeReadsAsItsArrowTypeRecordForRecord) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->DefineSeries("zloss", {.codec = Codec::kZstd}));
    ASSERT_OK(w->DefineSeries("ragged", {.dtype = DType::kInt32, .variable_shape = true}));
    for (int64_t run = 0; run < 3; ++run) {
      for (int64_t step = 0; step < 500; ++step) {
        const double x = run * 1000.0 + step;
        ASSERT_OK(w->Append(run, "loss", step, x));
        ASSERT_OK(w->Append(run, "zloss", step, -x));
        ASSERT_OK(w->Append(run, "flag", step, step % 3 == 0));
        ASSERT_OK(w->Append(run, "count", step, static_cast<uint16_t>(step)));
        const float grid[6] = {float(x), 1, 2, 3, 4, float(step)};
        const int64_t shape[] = {2, 3};
        ASSERT_OK(w->Append(run, "grid", step, ValueRef::Array(grid, shape)));
        const std::string note = "note " + std::to_string(step) + std::string(step % 7, 'x');
        ASSERT_OK(w->Append(run, "note", step, ValueRef::String(note)));
        ASSERT_OK(w->Append(run, "blob", step, ValueRef::Bytes(std::string("\0b", 2))));
        std::vector<int32_t> r(static_cast<size_t>(step % 4), static_cast<int32_t>(step));
        const int64_t rshape[] = {static_cast<int64_t>(r.size())};
        ASSERT_OK(w->Append(run, "ragged", step, ValueRef::Array(r.data(), rshape)));
        if (step % 100 == 99) ASSERT_OK(w->Commit());
      }
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  auto stream_of = [&](std::string_view name, Consumed* c, int64_t batch_rows = 64) {
    ArrowArrayStream s;
    ASSERT_OK(SeriesArrowStream(snap, name, {.batch_rows = batch_rows}, &s));
    Consume(&s, c);
    s.release(&s);
    EXPECT_EQ(s.release, nullptr);
  };
  struct Expect {
    const char* name;
    const char* format;
    const char* child;
  };
  for (const Expect e :
       {Expect{"loss", "g", ""}, Expect{"zloss", "g", ""}, Expect{"flag", "b", ""},
        Expect{"count", "S", ""}, Expect{"grid", "+w:6", "f"}, Expect{"note", "U", ""},
        Expect{"blob", "Z", ""}, Expect{"ragged", "+L", "i"}}) {
    SCOPED_TRACE(e.name);
    Consumed c;
    stream_of(e.name, &c);
    ASSERT_GE(c.formats.size(), 3u);
    EXPECT_EQ(c.names[0], "run");
    EXPECT_EQ(c.formats[0], "l");  // every run id an integer
    EXPECT_EQ(c.names[1], "step");
    EXPECT_EQ(c.formats[1], "l");
    EXPECT_EQ(c.names[2], "value");
    EXPECT_EQ(c.formats[2], e.format);
    EXPECT_EQ(c.child_formats[2], e.child);
    if (std::string(e.name) == "grid") {
      EXPECT_EQ(c.value_metadata, "runstore.shape=[2, 3]");
    }
    if (std::string(e.name) == "ragged") {
      ASSERT_EQ(c.names.size(), 4u);
      EXPECT_EQ(c.names[3], "shape");
    }
    // Record for record, in scan order, in batches of at most 64.
    int64_t k = 0;
    for (const ArrowArray& b : c.batches) {
      EXPECT_LE(b.length, 64);
      EXPECT_EQ(b.null_count, 0);
      const ArrowArray* run = b.children[0];
      const ArrowArray* step = b.children[1];
      const ArrowArray* value = b.children[2];
      for (int64_t i = 0; i < b.length; ++i, ++k) {
        const int64_t r = k / 500, st = k % 500;
        ASSERT_EQ(Int(run, i), r);
        ASSERT_EQ(Int(step, i), st);
        const double x = r * 1000.0 + st;
        const std::string n = e.name;
        if (n == "loss" || n == "zloss") {
          EXPECT_EQ(static_cast<const double*>(value->buffers[1])[i], n == "loss" ? x : -x);
        } else if (n == "flag") {
          const auto* bits = static_cast<const uint8_t*>(value->buffers[1]);
          EXPECT_EQ((bits[i / 8] >> (i % 8)) & 1, st % 3 == 0 ? 1 : 0);
        } else if (n == "count") {
          EXPECT_EQ(static_cast<const uint16_t*>(value->buffers[1])[i], st);
        } else if (n == "grid") {
          ASSERT_EQ(value->n_children, 1);
          const auto* f = static_cast<const float*>(value->children[0]->buffers[1]);
          EXPECT_EQ(f[i * 6], float(x));
          EXPECT_EQ(f[i * 6 + 5], float(st));
          EXPECT_EQ(value->children[0]->length, b.length * 6);
        } else if (n == "note") {
          EXPECT_EQ(Str(value, i), "note " + std::to_string(st) + std::string(st % 7, 'x'));
        } else if (n == "blob") {
          EXPECT_EQ(Str(value, i), std::string("\0b", 2));
        } else if (n == "ragged") {
          const auto* off = static_cast<const int64_t*>(value->buffers[1]);
          ASSERT_EQ(off[i + 1] - off[i], st % 4);
          const auto* el = static_cast<const int32_t*>(value->children[0]->buffers[1]);
          for (int64_t j = off[i]; j < off[i + 1]; ++j) EXPECT_EQ(el[j], st);
          const ArrowArray* shape = b.children[3];
          const auto* soff = static_cast<const int64_t*>(shape->buffers[1]);
          ASSERT_EQ(soff[i + 1] - soff[i], 1);
          EXPECT_EQ(static_cast<const int64_t*>(shape->children[0]->buffers[1])[soff[i]], st % 4);
        }
      }
    }
    EXPECT_EQ(k, 1500);
  }
}

TEST_F(ArrowStreamTest, UncompressedValuesAreTheMappedFilesBytesAndOutliveTheStore) {
  const int64_t kRecords = 10'000;
  ArrowArray kept{};
  const void* scan_bytes = nullptr;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
    {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
      for (int64_t i = 0; i < kRecords; ++i) {
        ASSERT_OK(w->Append(RunRef(HashedId(static_cast<uint64_t>(i))), "y", 0, double(i)));
      }
      ASSERT_OK(w->Close());
    }
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    {
      ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("y"));
      ScanBatch b;
      ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
      ASSERT_TRUE(more);
      ASSERT_TRUE(b.values.zero_copy());
      scan_bytes = b.values.data();
    }
    ArrowArrayStream s;
    ASSERT_OK(SeriesArrowStream(snap, "y", {.batch_rows = 4096}, &s));
    Consumed c;
    Consume(&s, &c);
    EXPECT_EQ(c.formats[0], "U");  // hashed ids: strings
    ASSERT_EQ(c.batches.size(), 3u);
    // The first batch's values are the bytes the scan maps: no copy.
    EXPECT_EQ(c.batches[0].children[2]->buffers[1], scan_bytes);
    EXPECT_EQ(c.batches[1].children[2]->buffers[1], static_cast<const double*>(scan_bytes) + 4096);
    kept = c.batches[2];
    c.batches.pop_back();
    s.release(&s);
  }
  // The stream, the snapshot and the store are gone: the batch still reads.
  ASSERT_NE(kept.release, nullptr);
  const auto* values = static_cast<const double*>(kept.children[2]->buffers[1]);
  double sum = 0;
  for (int64_t i = 0; i < kept.length; ++i) sum += values[i];
  EXPECT_EQ(kept.length, kRecords - 8192);
  EXPECT_EQ(Str(kept.children[0], 0).size(), HashedId(0).size());
  EXPECT_GT(sum, 0);
  kept.release(&kept);
}

TEST_F(ArrowStreamTest, FiltersAndErrors) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int64_t run = 0; run < 10; ++run) {
      for (int64_t step = 0; step < 100; ++step) ASSERT_OK(w->Append(run, "x", step, 1.0));
      ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Append(RunRef("named"), "x", 0, 2.0));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ArrowArrayStream s;
  ASSERT_OK(SeriesArrowStream(snap, "x",
                              {.runs = RunSet({RunId(3), RunId(7)}), .steps = {{10, 19}}}, &s));
  Consumed c;
  Consume(&s, &c);
  s.release(&s);
  EXPECT_EQ(c.formats[0], "U") << "one run id is a string: integers as their text";
  std::vector<std::string> got;
  for (const ArrowArray& b : c.batches) {
    for (int64_t i = 0; i < b.length; ++i) {
      got.push_back(Str(b.children[0], i) + "/" + std::to_string(Int(b.children[1], i)));
    }
  }
  ASSERT_EQ(got.size(), 20u);
  EXPECT_EQ(got.front(), "3/10");
  EXPECT_EQ(got.back(), "7/19");

  EXPECT_EQ(SeriesArrowStream(snap, "nope", {}, &s).code(), StatusCode::kNotFound);
  EXPECT_EQ(SeriesArrowStream(snap, "x", {.batch_rows = 0}, &s).code(),
            StatusCode::kInvalidArgument);
}

// The schema is what a view's registration and a query's planning ask for,
// for every series of a store: it reads no block. A series whose keys were
// written twice is resolved (its blocks read) at the first pull only.
TEST_F(ArrowStreamTest, TheSchemaReadsNoBlockTheFirstPullResolves) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int round = 0; round < 2; ++round) {
      for (int64_t step = 0; step < 100; ++step) ASSERT_OK(w->Append(1, "x", step, 1.0 * round));
      ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  const auto& impl = static_cast<const read::SnapshotImpl&>(*snap);
  ArrowArrayStream s;
  ASSERT_OK(SeriesArrowStream(snap, "x", {}, &s));
  ArrowSchema schema;
  ASSERT_EQ(s.get_schema(&s, &schema), 0);
  schema.release(&schema);
  EXPECT_EQ(impl.payload_reads(), 0u);
  Consumed c;
  Consume(&s, &c);
  s.release(&s);
  EXPECT_GT(impl.payload_reads(), 0u);
  int64_t rows = 0;
  for (const ArrowArray& b : c.batches) {
    rows += b.length;
    for (int64_t i = 0; i < b.length; ++i) {
      EXPECT_EQ(static_cast<const double*>(b.children[2]->buffers[1])[i], 1.0);
    }
  }
  EXPECT_EQ(rows, 100) << "each key once, the later commit's";
}

TEST_F(ArrowStreamTest, ADamagedBlockIsTheStreamsErrorNamingTheFile) {
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {}));
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int64_t step = 0; step < 1000; ++step) ASSERT_OK(w->Append(1, "x", step, 1234.5));
    ASSERT_OK(w->Close());
  }
  // One value's bytes changed in the segment file: its block's checksum no longer holds.
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(Path() + "/segments")) {
    if (e.path().extension() == ".rss") file = e.path().string();
  }
  ASSERT_FALSE(file.empty());
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const double v = 1234.5;
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&v), sizeof(v)));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 7] = static_cast<char>(bytes[at + 7] ^ 0x01);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(Path(), {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ArrowArrayStream s;
  ASSERT_OK(SeriesArrowStream(snap, "x", {}, &s));
  ArrowArray a;
  EXPECT_EQ(s.get_next(&s, &a), EIO);
  ASSERT_NE(s.get_last_error(&s), nullptr);
  const std::string error = s.get_last_error(&s);
  EXPECT_NE(error.find("Corruption"), std::string::npos) << error;
  EXPECT_NE(error.find(".rss"), std::string::npos) << error;
  s.release(&s);
}

}  // namespace
}  // namespace runstore
