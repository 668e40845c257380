// Whether a store whose every checksum holds reads back consistently: the
// input is the store target's (store_fuzzer.cc), with every checksum of the
// segments recomputed whatever its flags say, so that what a reader is asked
// to trust is only what the blocks' headers and payloads claim. Where the
// store opens, each series must read the same through every path of the
// public API (docs/format.md "Keys and resolving them"; reader.h):
//
//  - a scan returns each key at most once (the later write wins), and as
//    many records as GetSeriesInfo counts;
//  - Get of a key the scan returned finds it, with the same bytes and shape;
//  - a scan filtered to that key's run and step returns it, and only it;
//  - ListRuns lists exactly the runs the scans of non-reserved series return.
//
// A read may still fail with Corruption; only answers that disagree with
// each other are failures.
//
// One claim is out of that contract: a footer's run index whose checksum
// holds and that misstates a block's runs. Lookups by run trust it to leave
// blocks out (docs/reliability.md, "What is not detected"), so reads of such
// a store may disagree; it is held instead to VerifyAll reporting it. Only
// blocks that read back are compared with the index: one whose records fail
// their check is Corruption to every read and to verify, whatever the index
// says of it.
//
// Headers that misstate their block's keys (key range, step range,
// kBlockKeysAscending) were once trusted the same way; BlockView::CheckRecords
// now refuses them. Inputs of engine bugs not fixed yet go in
// fuzz/regressions/store_keys/known_failing/.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "format/block_reader.h"
#include "format/segment_reader.h"
#include "fuzz_util.h"
#include "util/coding.h"

namespace runstore {
namespace {

constexpr char kStore[] = "/s";
// Series larger than this are read but not compared record by record.
constexpr size_t kMaxRecords = 1 << 16;
constexpr size_t kKeysPerSeries = 16;

struct Record {
  RunId run;
  int64_t step;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::string KeyString(const std::string& name, const RunId& run, int64_t step) {
  return "'" + name + "' run " + run.ToString() + " step " + std::to_string(step);
}

// Every record of a scan with `options`; false if the scan fails or is too
// large to compare.
bool ScanAll(const Snapshot& snap, const std::string& name, const ScanOptions& options,
             std::vector<Record>* out) {
  out->clear();
  auto scanner = snap.Scan(name, options);
  if (!scanner.ok()) return false;
  ScanBatch b;
  while (true) {
    auto more = (*scanner)->Next(&b);
    if (!more.ok()) return false;
    if (!*more) return true;
    if (out->size() + b.count > kMaxRecords) return false;
    std::vector<int64_t> shape;
    size_t record_bytes = 0;
    if (b.records.empty()) {
      shape.assign(b.values.shape().begin() + 1, b.values.shape().end());
      record_bytes = b.values.nbytes() / b.count;
    }
    for (size_t i = 0; i < b.count; ++i) {
      Record r{b.run(i), b.steps[i], DType::kFloat64, shape, ""};
      if (b.records.empty()) {
        r.dtype = b.values.dtype();
        r.bytes.assign(b.values.data() + i * record_bytes, record_bytes);
      } else {
        r.dtype = b.records[i].dtype();
        r.shape = b.records[i].shape();
        r.bytes.assign(b.records[i].data(), b.records[i].nbytes());
      }
      out->push_back(std::move(r));
    }
  }
}

// Checks one series; false if its scan failed or was too large to compare,
// so that *runs does not hold all of its runs.
bool CheckSeries(const Snapshot& snap, const std::string& name, std::set<RunId>* runs) {
  std::vector<Record> all;
  if (!ScanAll(snap, name, ScanOptions(), &all)) return false;
  auto info = snap.GetSeriesInfo(name);
  if (info.ok()) {
    RUNSTORE_FUZZ_CHECK(info->count == all.size(),
                        "'" + name + "': GetSeriesInfo counts " + std::to_string(info->count) +
                            " records, a scan returns " + std::to_string(all.size()));
  }
  std::set<std::pair<RunId, int64_t>> keys;
  for (const Record& r : all) {
    RUNSTORE_FUZZ_CHECK(keys.emplace(r.run, r.step).second,
                        "a scan returns " + KeyString(name, r.run, r.step) + " twice");
    if (name[0] != '~') runs->insert(r.run);
  }
  for (size_t i = 0; i < all.size() && i < kKeysPerSeries; ++i) {
    const Record& r = all[i];
    const std::string key = KeyString(name, r.run, r.step);
    auto v = snap.Get(r.run, name, r.step);
    if (v.ok() || v.status().code() == StatusCode::kNotFound) {
      RUNSTORE_FUZZ_CHECK(v.ok(), "a scan returns " + key + ", Get: " + v.status().ToString());
      RUNSTORE_FUZZ_CHECK(v->dtype() == r.dtype && v->shape() == r.shape &&
                              std::string_view(v->data(), v->nbytes()) == r.bytes,
                          "Get of " + key + " differs from the scan's record");
    }
    ScanOptions one;
    one.runs = std::vector<RunId>{r.run};
    one.steps = ScanOptions::StepRange{r.step, r.step};
    std::vector<Record> got;
    if (ScanAll(snap, name, one, &got)) {
      RUNSTORE_FUZZ_CHECK(got.size() == 1, "a scan filtered to " + key + " returns " +
                                               std::to_string(got.size()) + " records");
      RUNSTORE_FUZZ_CHECK(got[0].run == r.run && got[0].step == r.step && got[0].bytes == r.bytes,
                          "a scan filtered to " + key + " returns another record");
    }
  }
  return true;
}

// Calls fn(index, block number, decoded block) for every block of the
// segment at `path` that reads back (its checksum, its decoding and the check
// of its records that every read makes first: a block that fails one is
// Corruption to every reader and to verify, whatever its index says); false
// as soon as fn returns false.
template <typename Fn>
bool ForEachBlock(Env* env, const std::string& path, Fn fn) {
  auto file = env->NewRandomAccessFile(path);
  if (!file.ok()) return true;
  format::SegmentIndex index;
  if (!format::LoadSegmentIndex(**file, "segments/x", &index).ok()) return true;
  auto map = (*file)->Map(index.committed_end);
  if (!map.ok()) return true;
  for (uint32_t bi = 0; bi < index.blocks.size(); ++bi) {
    const format::BlockInfo& b = index.blocks[bi];
    if (!RangeWithin(b.payload_offset, b.header.payload_len, (*map)->size())) continue;
    const std::string_view stored((*map)->data() + b.payload_offset, b.header.payload_len);
    format::DecodedBlock d;
    if (!format::CheckPayload(stored, b, "segments/x").ok() ||
        !format::DecodeBlock(stored, nullptr, *map, b, "segments/x", &d).ok() ||
        !d.view.CheckRecords(b.header).ok()) {
      continue;
    }
    if (!fn(index, bi, d)) return false;
  }
  return true;
}

// Whether the footer's run index lists exactly the runs of every block it
// lists (an empty list: the block is not listed). A checksummed footer may
// misstate them, and readers trust it to leave blocks out of lookups by run
// (docs/reliability.md, "What is not detected"): such a store is held to
// verify reporting it, not to its reads agreeing.
bool RunIndexDescribesBlocks(Env* env, const std::string& path) {
  std::vector<uint64_t> hashes;
  return ForEachBlock(
      env, path,
      [&](const format::SegmentIndex& index, uint32_t bi, const format::DecodedBlock& d) {
        if (!index.run_index) return true;
        const auto listed = index.run_index->Of(bi);
        if (listed.empty()) return true;
        format::RunHashesOf(d.view, &hashes);
        return std::equal(hashes.begin(), hashes.end(), listed.begin(), listed.end());
      });
}

void Run(const uint8_t* data, size_t size) {
  fuzzing::InputReader in(data, size);
  const uint8_t flags = in.Get<uint8_t>();
  (void)in.Get<uint32_t>();  // the store target's cut: nothing changes here
  const std::string_view marker = in.Take(in.Get<uint16_t>());
  std::vector<std::string> segments;
  segments.emplace_back(in.Take(in.Get<uint32_t>()));
  if (flags & 2) segments.emplace_back(in.Rest());
  const std::string names[] = {"f-00000001.rss", (flags & 4) ? "f-00000002.rss" : "g-00000001.rss"};
  std::unique_ptr<Env> env = fuzzing::NewExactMemEnv();
  fuzzing::MakeStoreDir(env.get(), kStore, marker);
  for (size_t i = 0; i < segments.size(); ++i) {
    fuzzing::FixChecksums(&segments[i]);
    fuzzing::PutFile(env.get(), std::string(kStore) + "/segments/" + names[i], segments[i]);
  }
  std::unique_ptr<Store> store = fuzzing::OpenReadOnly(env.get(), kStore);
  if (!store) return;
  std::shared_ptr<const Snapshot> snap = store->GetSnapshot();
  for (size_t i = 0; i < segments.size(); ++i) {
    if (RunIndexDescribesBlocks(env.get(), std::string(kStore) + "/segments/" + names[i])) continue;
    const VerifyReport report = snap->VerifyAll();
    bool reported = false;
    for (const Status& p : report.problems) {
      reported = reported || p.message().find("run index") != std::string::npos;
    }
    RUNSTORE_FUZZ_CHECK(reported, "segments/" + names[i] +
                                      ": the footer's run index misstates a block's runs, and "
                                      "verify does not report it");
    return;
  }
  auto series = snap->ListSeries(/*include_reserved=*/true);
  if (!series.ok()) return;
  std::set<RunId> runs;
  bool complete = true;
  for (const SeriesInfo& s : *series) complete = CheckSeries(*snap, s.name, &runs) && complete;
  auto listed = snap->ListRuns();
  if (listed.ok() && complete) {
    const std::set<RunId> from_list(listed->begin(), listed->end());
    RUNSTORE_FUZZ_CHECK(from_list == runs, "ListRuns lists " + std::to_string(from_list.size()) +
                                               " runs, the scans return " +
                                               std::to_string(runs.size()));
  }
}

}  // namespace
}  // namespace runstore

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runstore::Run(data, size);
  return 0;
}
