// Writes a golden store of the format version this program is built against,
// and the list of what that store must show (tests/golden/README.md).
//
//   golden_writer <output dir>
//
// Creates <output dir>/store and <output dir>/expected.txt; the directory
// must not hold a store yet. scripts/make_golden.sh compiles this one file
// against the library of each tagged format version (format-v1, -v2, -v3),
// so it uses only the public API those versions share, and what a later
// version added (Flush from 2, CommitAsync from 3) only where
// runstore::kFormatVersion says it exists. tests/golden_test.cc reads the
// stores with the current build.
//
// The data is deterministic and the writer ids fixed: two runs differ only in
// the timestamps of segment headers and commit records. expected.txt is
// computed from what was appended and the resolution rules of docs/format.md
// (a later commit wins; a resume marker hides the earlier records of its run
// at steps >= its step), never by reading the store back.
//
// Any error: a message on stderr and exit status 2.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "runstore/store.h"

namespace {

using runstore::DType;
using runstore::RunId;
using runstore::RunRef;
using runstore::Status;
using runstore::ValueRef;

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "golden_writer: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(2);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what, s);
}

// ---------------------------------------------------------------------------
// The model of what the store must show.

struct Key {
  std::string series;
  RunId run;
  int64_t step = 0;
  friend bool operator<(const Key& a, const Key& b) {
    return std::tie(a.series, a.run, a.step) < std::tie(b.series, b.run, b.step);
  }
};

struct Val {
  DType dtype = DType::kFloat64;
  std::vector<int64_t> shape;
  std::string bytes;
};

// One writer's records since its last commit, in append order.
using Pending = std::vector<std::pair<Key, Val>>;

class Model {
 public:
  // A commit (or a flush: a crash of the process keeps it) of `pending`:
  // within it, a later record of a key replaces an earlier one.
  void Commit(Pending* pending) {
    for (auto& [k, v] : *pending) visible_[k] = std::move(v);
    pending->clear();
  }
  // A resume marker, in a commit of its own after everything before it: hides
  // the run's records at steps >= step in every series not starting with '~'.
  void Resume(const RunId& run, int64_t step) {
    for (auto it = visible_.begin(); it != visible_.end();) {
      const Key& k = it->first;
      if (k.run == run && k.step >= step && k.series[0] != '~') {
        it = visible_.erase(it);
      } else {
        ++it;
      }
    }
    Val marker{DType::kInt64, {}, std::string(reinterpret_cast<const char*>(&step), sizeof step)};
    visible_[Key{"~resume", run, step}] = marker;
  }
  void Wrote(const Key& k) { written_.insert(k); }

  const std::map<Key, Val>& visible() const { return visible_; }
  const std::set<Key>& written() const { return written_; }

 private:
  std::map<Key, Val> visible_;
  std::set<Key> written_;  // every key ever appended, visible or not
};

// ---------------------------------------------------------------------------
// What a later version added. Called through templates, so that the branch
// naming a function this version lacks is never instantiated.

template <typename W>
Status FlushOn(W& w) {
  if constexpr (runstore::kFormatVersion >= 2) {
    return w.Flush();
  } else {
    return w.Commit();
  }
}

template <typename W>
Status CommitWaitedOn(W& w) {
  if constexpr (runstore::kFormatVersion >= 3) {
    auto ticket = w.CommitAsync();
    if (!ticket.ok()) return ticket.status();
    return w.WaitForCommit(*ticket);
  } else {
    return w.Commit();
  }
}

// ---------------------------------------------------------------------------
// A writer that records what it appends in the model.

class Golden {
 public:
  Golden(runstore::Store* store, const runstore::WriterOptions& options, Model* model)
      : model_(model), id_(options.writer_id) {
    auto w = store->NewWriter(options);
    if (!w.ok()) Die("NewWriter " + id_, w.status());
    w_ = std::move(w).value();
  }

  runstore::Writer& writer() { return *w_; }

  void Define(std::string_view name, const runstore::SeriesOptions& o) {
    Check(w_->DefineSeries(name, o), id_ + ": DefineSeries " + std::string(name));
  }

  void Put(RunRef run, std::string_view series, int64_t step, const ValueRef& v) {
    Record(run, series, step, v);
    Check(w_->Append(run, series, step, v), id_ + ": Append to " + std::string(series));
  }
  template <typename T>
  void Put(RunRef run, std::string_view series, int64_t step, T scalar) {
    Put(run, series, step, ValueRef::Scalar(scalar));
  }

  void PutRecord(RunRef run, int64_t step, const std::vector<runstore::NamedValue>& values) {
    for (const auto& nv : values) Record(run, nv.name, step, nv.value);
    Check(w_->AppendRecord(run, step, values), id_ + ": AppendRecord");
  }

  // n scalar records of one series in one call.
  template <typename T>
  void PutBatch(const std::vector<RunRef>& runs, std::string_view series,
                const std::vector<int64_t>& steps, const std::vector<T>& values) {
    for (size_t i = 0; i < runs.size(); ++i) {
      Record(runs[i], series, steps[i], ValueRef::Scalar(values[i]));
    }
    const int64_t shape[] = {static_cast<int64_t>(values.size())};
    Check(w_->AppendBatch(runs, series, steps, ValueRef::Array(values.data(), shape)),
          id_ + ": AppendBatch to " + std::string(series));
  }

  void Commit() {
    Check(w_->Commit(), id_ + ": Commit");
    model_->Commit(&pending_);
  }

  // A commit through CommitAsync and WaitForCommit where they exist (one
  // commit in flight at a time, so that the bytes do not depend on thread
  // timing), Commit before.
  void CommitWaited() {
    Check(CommitWaitedOn(*w_), id_ + ": CommitAsync and WaitForCommit");
    model_->Commit(&pending_);
  }

  // Flush where it exists (visible, and kept by a crash of the process),
  // Commit before.
  void Flush() {
    Check(FlushOn(*w_), id_ + ": Flush");
    model_->Commit(&pending_);
  }

  void Resume(RunRef run, int64_t step) {
    Check(w_->Resume(run, step), id_ + ": Resume");
    model_->Commit(&pending_);  // Resume commits what was appended before it
    model_->Resume(run.ToRunId(), step);
  }

  void Close() {
    Check(w_->Close(), id_ + ": Close");
    model_->Commit(&pending_);
  }

 private:
  void Record(RunRef run, std::string_view series, int64_t step, const ValueRef& v) {
    Key k{std::string(series), run.ToRunId(), step};
    model_->Wrote(k);
    pending_.emplace_back(k, Val{v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.end()),
                                 std::string(static_cast<const char*>(v.data), v.nbytes)});
  }

  Model* model_;
  std::string id_;
  std::unique_ptr<runstore::Writer> w_;
  Pending pending_;
};

runstore::WriterOptions Options(const char* id) {
  runstore::WriterOptions o;
  o.writer_id = id;
  o.buffer_bytes = 1 << 20;
  o.block_bytes = 4096;        // a series of a few hundred records takes several blocks
  o.large_value_bytes = 4096;  // the arrays below are blocks of their own
  return o;
}

std::vector<double> Ramp(size_t n, double base, double step) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + step * static_cast<double>(i);
  return v;
}

// ---------------------------------------------------------------------------
// The store.

// Writer "alpha": every dtype and shape kind, codecs, string and mixed runs,
// keys written twice, resume markers, flushes, large values; closed (sealed).
void WriteAlpha(runstore::Store* store, Model* model) {
  Golden a(store, Options("alpha"), model);
  a.Define("trace_z", {DType::kFloat32, {16}, false, runstore::Codec::kZstd});
  a.Define("trace_l", {DType::kFloat32, {16}, false, runstore::Codec::kLz4});
  a.Define("var", {DType::kInt16, {}, true, runstore::Codec::kNone});
  a.Define("bigvar", {DType::kInt16, {}, true, runstore::Codec::kNone});
  a.Define("bigz", {DType::kFloat32, {1500}, false, runstore::Codec::kZstd});

  // Commit 1: scalars of four dtypes over integer runs, in sweep order so
  // that the key columns are runs of equal differences (stored as sequences
  // from version 2 on).
  for (int run = 0; run < 5; ++run) {
    for (int step = 0; step < 40; ++step) a.Put(run, "loss", step, run * 100.0 + step * 0.5);
    a.Put(run, "count", 0, int32_t{run * 7 - 3});
    for (int step = 0; step < 4; ++step) a.Put(run, "flag", step, (run + step) % 2 == 0);
  }
  {
    std::vector<RunRef> runs;
    std::vector<int64_t> steps;
    std::vector<uint8_t> values;
    for (int i = 0; i < 12; ++i) {
      runs.emplace_back(int64_t{i % 3});
      steps.push_back(i / 3);
      values.push_back(static_cast<uint8_t>(250 + i));  // wraps past 255
    }
    a.PutBatch(runs, "byte", steps, values);
  }
  a.Commit();

  // Commit 2: fixed-shape float32[16] under zstd and lz4, a variable-shape
  // int16 series, strings and bytes under string runs.
  const int64_t vec16[] = {16};
  for (int run = 0; run < 3; ++run) {
    for (int step = 0; step < 12; ++step) {
      float z[16], l[16];
      for (int i = 0; i < 16; ++i) {
        z[i] = static_cast<float>((step + i) % 4) * 0.5f;  // compressible
        l[i] = static_cast<float>(i % 2) + static_cast<float>(run);
      }
      a.Put(run, "trace_z", step, ValueRef::Array(z, vec16));
      a.Put(run, "trace_l", step, ValueRef::Array(l, vec16));
    }
  }
  for (const char* run : {"exp-a", "exp-b"}) {
    for (int step = 0; step < 5; ++step) {
      const int64_t rows = step % 3 + 1, cols = run[4] == 'a' ? 2 : 3;
      std::vector<int16_t> v(static_cast<size_t>(rows * cols));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int16_t>(step * 100 - 7 * i);
      const int64_t shape2[] = {rows, cols};
      const int64_t shape1[] = {rows * cols};
      if (step % 2 == 0) {
        a.Put(run, "var", step, ValueRef::Array(v.data(), shape2));
      } else {
        a.Put(run, "var", step, ValueRef::Array(v.data(), shape1));
      }
      const std::string text = step == 0 ? std::string()  // an empty string
                                         : std::string(run) + " step " + std::to_string(step) +
                                               (step == 3 ? " \xc3\xa9t\xc3\xa9" : "");  // UTF-8
      a.Put(run, "text", step, ValueRef::String(text));
      const std::string blob =
          std::string("\x00\x01\xff", 3) + std::string(static_cast<size_t>(step), 'x');
      a.Put(run, "blob", step, ValueRef::Bytes(blob));
    }
  }
  a.Commit();

  // A flush (from version 2; a commit before).
  for (int step = 40; step < 50; ++step) a.Put(0, "loss", step, -1.0 * step);
  a.Flush();

  // Commit 3: keys written again. (0, loss, 0) and (1, loss, 3) replace the
  // records of commit 1; (2, loss, 5) is written twice in this commit, and
  // the later of the two wins. 'status' mixes integer and string runs.
  a.Put(0, "loss", 0, 42.0);
  a.Put(1, "loss", 3, 43.0);
  a.Put(2, "loss", 5, 44.0);
  a.Put(2, "loss", 5, 45.0);
  a.Put(7, "status", 0, ValueRef::String("int run"));
  a.Put("exp-c", "status", 0, ValueRef::String("string run"));
  a.Put(8, "status", 1, ValueRef::String("int run again"));
  a.Put("exp-a", "status", 2, ValueRef::String("exp-a in status"));
  {
    const double score = 0.75;
    const int32_t n = 12;
    const bool ok = true;
    a.PutRecord("exp-c", 0,
                {{"score", ValueRef::Scalar(score)},
                 {"n", ValueRef::Scalar(n)},
                 {"ok", ValueRef::Scalar(ok)}});
    const double score7 = -0.25;
    a.PutRecord(7, 0, {{"score", ValueRef::Scalar(score7)}});
  }
  a.CommitWaited();

  // Resume(1, 10): hides run 1 at steps >= 10 in every series; then run 1
  // is re-run at steps 10..14, which stay visible.
  a.Resume(1, 10);
  for (int step = 10; step < 15; ++step) a.Put(1, "loss", step, 1000.0 + step);
  a.Flush();

  // Resume of a string run, in the variable-shape, string and bytes series.
  a.Resume("exp-a", 2);
  a.Put("exp-a", "text", 2, ValueRef::String("exp-a re-run"));
  a.Commit();

  // Large values, each a block of its own (large_value_bytes is 4096): from
  // version 3, the uncompressed numeric ones carry a checksum per 4 KiB chunk.
  {
    const std::vector<double> big = Ramp(1100, 3.0, 0.125);  // 8800 bytes: 3 chunks
    const int64_t shape[] = {1100};
    a.Put(3, "big", 0, ValueRef::Array(big.data(), shape));
    a.Put(3, "big", 1, ValueRef::Array(big.data(), shape));
    std::vector<int16_t> bv(40 * 60);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<int16_t>(i * 31 % 65521 - 30000);
    const int64_t bshape[] = {40, 60};
    a.Put(3, "bigvar", 0, ValueRef::Array(bv.data(), bshape));
    std::vector<float> bz(1500);
    for (size_t i = 0; i < bz.size(); ++i) bz[i] = static_cast<float>(i % 10);  // compressible
    const int64_t zshape[] = {1500};
    a.Put(3, "bigz", 0, ValueRef::Array(bz.data(), zshape));
    std::string blob(5000, '\0');
    for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);
    a.Put("exp-b", "blob", 9, ValueRef::Bytes(blob));
  }
  a.Commit();

  // (3, big, 0) again, in a later commit: the newer array wins.
  {
    const std::vector<double> big = Ramp(1100, -5.0, 0.25);
    const int64_t shape[] = {1100};
    a.Put(3, "big", 0, ValueRef::Array(big.data(), shape));
  }
  a.Put(4, "loss", 40, 4040.0);
  a.Close();
}

// Writer "beta", first life: its own runs in series alpha created; closed.
void WriteBetaFirstLife(runstore::Store* store, Model* model) {
  Golden b(store, Options("beta"), model);
  for (int run = 10; run < 12; ++run) {
    for (int step = 0; step < 8; ++step) b.Put(run, "loss", step, run + step / 8.0);
  }
  b.Put("beta-run", "text", 0, ValueRef::String("from beta"));
  b.Commit();
  b.Put(10, "count", 0, int32_t{1010});
  if constexpr (runstore::kFormatVersion >= 4) {
    // Version 4: the footer's run index. Runs named like the experiments
    // layer's hashed ids, spread over 20 commits (a block each), so that
    // every block's key range covers most lookups and they go by the index;
    // one run written again in the last commit, which wins.
    auto hashed = [](uint64_t i) {
      uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ULL;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      static const char kDigits[] = "0123456789abcdef";
      std::string id;
      for (int k = 0; k < 16; ++k) id += kDigits[(z >> (4 * k)) & 15];
      return id;
    };
    for (int c = 0; c < 20; ++c) {
      b.Commit();
      for (int j = 0; j < 6; ++j) b.Put(hashed(c * 6 + j), "exp", 0, 1.0 * (c * 6 + j));
    }
    b.Put(hashed(3), "exp", 0, -3.0);
  }
  b.Close();
}

// ---------------------------------------------------------------------------
// expected.txt

std::string Hex(std::string_view bytes) {
  if (bytes.empty()) return "-";
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string RunString(const RunId& r) {
  return r.is_int() ? "i:" + std::to_string(r.int_value()) : "s:" + r.string_value();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

void WriteExpected(const std::string& file, const Model& model) {
  std::string out =
      "# The records the golden store beside this file must show, one per line; keys that\n"
      "# were written but must not be visible; its segments. Written by\n"
      "# tests/programs/golden_writer.cc from what it appended, never by reading the store\n"
      "# back. The format is in tests/golden/README.md. Never edit by hand.\n";
  out += "format_version " + std::to_string(runstore::kFormatVersion) + "\n";
  out += "segment segments/alpha-00000001.rss sealed\n";
  out += "segment segments/beta-00000001.rss sealed\n";
  out += "segment segments/beta-00000002.rss unsealed\n";
  for (const auto& [k, v] : model.visible()) {
    out += "record " + k.series + " " + RunString(k.run) + " " + std::to_string(k.step) + " " +
           std::string(runstore::DTypeName(v.dtype)) + " " + ShapeString(v.shape) + " " +
           Hex(v.bytes) + "\n";
  }
  for (const Key& k : model.written()) {
    if (model.visible().count(k)) continue;
    out += "absent " + k.series + " " + RunString(k.run) + " " + std::to_string(k.step) + "\n";
  }
  FILE* f = std::fopen(file.c_str(), "w");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size() ||
      std::fclose(f) != 0) {
    std::perror(file.c_str());
    std::exit(2);
  }
}

// Writer "beta", second life (a restart continues at segment 2), in a child
// process: commits, flushes, appends more, and dies without closing, as a
// crashed process does. Its segment stays unsealed, with frames after its
// last commit. The child, holding the whole model, writes `expected` first.
void WriteBetaCrashedLife(const std::string& path, Model* model, const std::string& expected) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(2);
  }
  if (pid == 0) {
    auto store = runstore::Store::Open(path, {});
    if (!store.ok()) Die("Store::Open", store.status());
    Golden b(store->get(), Options("beta"), model);
    for (int step = 0; step < 5; ++step) b.Put(20, "loss", step, 2000.0 + step);
    b.Commit();
    // Two flushes: the record of the second says that the bytes before it
    // were not synced (unsynced_before), so recovery checks both.
    for (int step = 5; step < 10; ++step) b.Put(20, "loss", step, 2000.0 + step);
    b.Flush();
    for (int step = 10; step < 13; ++step) b.Put(20, "loss", step, 2000.0 + step);
    b.Flush();
    // Never committed: the large value reaches the file before Append
    // returns; the small records never leave the process.
    for (int step = 13; step < 16; ++step) b.Put(20, "loss", step, 2000.0 + step);
    const std::vector<double> big = Ramp(1100, 20.0, 1.0);
    const int64_t shape[] = {1100};
    b.Put(20, "big", 0, ValueRef::Array(big.data(), shape));
    WriteExpected(expected, *model);
    std::printf("golden_writer: format version %u: %zu visible records, %zu keys written\n",
                runstore::kFormatVersion, model->visible().size(), model->written().size());
    std::fflush(nullptr);
    ::_exit(0);  // no Close, no destructors: the process is gone
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "golden_writer: the crashing writer failed (status %d)\n", status);
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: golden_writer <output dir>\n");
    return 1;
  }
  const std::string out = argv[1];
  const std::string path = out + "/store";
  ::mkdir(out.c_str(), 0755);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    std::fprintf(stderr, "golden_writer: %s exists; remove it first\n", path.c_str());
    return 1;
  }
  Model model;
  {
    auto store = runstore::Store::Open(path, {});
    if (!store.ok()) Die("Store::Open " + path, store.status());
    WriteAlpha(store->get(), &model);
    WriteBetaFirstLife(store->get(), &model);
  }
  // Forked with no writer thread alive in this process.
  WriteBetaCrashedLife(path, &model, out + "/expected.txt");
  return 0;
}
