// make_fixture: writes the small stores that cli_test.sh runs the CLI on.
//
//   make_fixture good DIR           a store with every dtype, fixed and
//                                   variable shapes, int and string runs,
//                                   a resume marker, two sealed segments and
//                                   one open (unsealed) segment.
//   make_fixture corrupt DIR        a sealed store, then one byte flipped in
//                                   the middle of a block payload. Prints
//                                   "<segment file> <offset>" of the flip.
//   make_fixture corrupt-header DIR a sealed store, then the first byte of
//                                   the segment (its magic) flipped, so that
//                                   opening the store fails with Corruption.
//                                   (A damaged index footer does not: the
//                                   reader then recovers by scanning frames.)
//   make_fixture zero-size DIR      arrays with a zero dimension: "cols"
//                                   float64 (100, 0) and "rows3" int32 (0, 3)
//                                   for runs 0..2, and "var" (variable
//                                   shape, int32) of shape (0, 3) for run 0
//                                   and [1, 2] for run 1.
//   make_fixture formulas DIR       text a spreadsheet would take for a formula
//                                   (runstore/csv.h): "cell" (string) and
//                                   "blob" (bytes, base64 beginning with '+')
//                                   under string runs "=cmd" and "-5" and int
//                                   run -3, "neg" (float64 -1.5, -inf), and
//                                   series named "Loss", "loss" and "CON".
//
// Uses only the public headers; the corruption is done with plain file I/O.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "runstore/store.h"

namespace {

using runstore::DType;
using runstore::Status;
using runstore::ValueRef;

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::cerr << "make_fixture: " << what << ": " << s.ToString() << "\n";
  std::exit(1);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what, s);
}

template <typename T>
T Unwrap(runstore::Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what, r.status());
  return std::move(r).value();
}

std::unique_ptr<runstore::Store> OpenStore(const std::string& dir) {
  return Unwrap(runstore::Store::Open(dir, {}), "open " + dir);
}

std::unique_ptr<runstore::Writer> NewWriter(runstore::Store* store, const std::string& id) {
  runstore::WriterOptions o;
  o.writer_id = id;
  o.large_value_bytes = 64 << 10;
  return Unwrap(store->NewWriter(o), "new writer " + id);
}

// The "big" series: one large float64 array written as a block of its own.
constexpr int64_t kBigElements = 20000;
double BigValue(int64_t i) { return 0.25 * static_cast<double>(i); }

void WriteBig(runstore::Writer* w) {
  std::vector<double> big(kBigElements);
  for (int64_t i = 0; i < kBigElements; ++i) big[i] = BigValue(i);
  const int64_t shape[] = {100, 200};
  Check(w->Append(7, "big", 0, ValueRef::Array(big.data(), shape)), "append big");
}

int Good(const std::string& dir) {
  auto store = OpenStore(dir);
  {
    auto w = NewWriter(store.get(), "alpha");
    // Scalars of several dtypes, int runs 0..9, steps 0..4 (loss) or 0.
    for (int run = 0; run < 10; ++run) {
      for (int step = 0; step < 5; ++step) {
        Check(w->Append(run, "loss", step, 0.5 * run + step), "loss");
      }
      Check(w->Append(run, "flag", 0, run % 2 == 0), "flag");
      Check(w->Append(run, "count", 0, int32_t{-run * 1000}), "count");
      Check(w->Append(run, "small", 0, uint8_t(250 + run % 6)), "small");
      Check(w->Append(run, "qi/3_17", 0, float(run) / 10.0f), "qi");
    }
    // Fixed-shape arrays.
    for (int run = 0; run < 3; ++run) {
      std::vector<float> g(12);
      for (int i = 0; i < 12; ++i) g[i] = static_cast<float>(run * 100 + i) + 0.5f;
      const int64_t gshape[] = {3, 4};
      Check(w->Append(run, "grid", 0, ValueRef::Array(g.data(), gshape)), "grid");
      int64_t v[3] = {run, -run, int64_t{1} << 40};
      const int64_t vshape[] = {3};
      Check(w->Append(run, "vec", 0, ValueRef::Array(v, vshape)), "vec");
    }
    // Special floating-point values.
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               0.1,
                               -0.0,
                               1e300};
    for (int i = 0; i < 6; ++i) Check(w->Append(0, "special", i, specials[i]), "special");
    // Variable-shape series.
    runstore::SeriesOptions var;
    var.dtype = DType::kFloat64;
    var.variable_shape = true;
    Check(w->DefineSeries("trace", var), "define trace");
    for (int run = 0; run < 3; ++run) {
      std::vector<double> t(static_cast<size_t>(run + 1) * 2);
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i) + run / 4.0;
      std::vector<int64_t> shape = run == 2 ? std::vector<int64_t>{3, 2}
                                            : std::vector<int64_t>{static_cast<int64_t>(t.size())};
      Check(w->Append(run, "trace", 0, ValueRef::Array(t.data(), shape)), "trace");
    }
    // Strings with characters that need quoting, under string run ids.
    Check(w->Append("exp-a", "label", 0, ValueRef::String("plain")), "label");
    Check(w->Append("exp,b", "label", 0, ValueRef::String("has, comma")), "label");
    Check(w->Append("exp-c", "label", 0, ValueRef::String("say \"hi\"\nnext line")), "label");
    Check(w->Append("exp-d", "label", 0, ValueRef::String("h\xc3\xa9llo\ttab")), "label");
    // Raw bytes.
    const char raw[] = {0x00, 0x01, static_cast<char>(0xff), 'A'};
    Check(w->Append("exp-a", "blob", 0, ValueRef::Bytes(std::string_view(raw, 4))), "blob");
    Check(w->Append("exp-b", "blob", 0, ValueRef::Bytes("")), "blob");
    WriteBig(w.get());
    Check(w->Close(), "close alpha");
  }
  {
    // A second writer: string runs in "loss" (mixed run kinds), and a resume
    // of run 3 at step 2, hiding alpha's loss records of run 3 at steps 2..4.
    auto w = NewWriter(store.get(), "beta");
    Check(w->Resume(3, 2), "resume");
    Check(w->Append(3, "loss", 2, 99.0), "loss resumed");
    Check(w->Append("s1", "loss", 0, 1.5), "loss s1");
    Check(w->Append("s2", "loss", 0, 2.5), "loss s2");
    Check(w->Close(), "close beta");
  }
  {
    // A third writer that commits and then dies: its segment stays open.
    auto w = NewWriter(store.get(), "gamma");
    Check(w->Append(100, "late", 0, int64_t{42}), "late");
    Check(w->Commit(), "commit gamma");
    std::fflush(nullptr);
    _exit(0);
  }
}

std::string OnlySegment(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/segments")) {
    if (e.path().extension() == ".rss") files.push_back(e.path().filename().string());
  }
  if (files.size() != 1) {
    std::cerr << "make_fixture: expected one segment in " << dir << ", found " << files.size()
              << "\n";
    std::exit(1);
  }
  return "segments/" + files[0];
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void FlipByte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  if (!f) {
    std::cerr << "make_fixture: cannot flip byte " << offset << " of " << path << "\n";
    std::exit(1);
  }
}

void WriteSealedStore(const std::string& dir) {
  auto store = OpenStore(dir);
  auto w = NewWriter(store.get(), "solo");
  for (int run = 0; run < 5; ++run) Check(w->Append(run, "loss", 0, 1.0 * run), "loss");
  WriteBig(w.get());
  Check(w->Close(), "close");
}

int Corrupt(const std::string& dir) {
  WriteSealedStore(dir);
  const std::string rel = OnlySegment(dir);
  const std::string bytes = ReadAll(dir + "/" + rel);
  // Find the big array's payload by its contents: elements 1000..1003.
  std::string needle(4 * sizeof(double), '\0');
  for (int i = 0; i < 4; ++i) {
    const double v = BigValue(1000 + i);
    std::memcpy(needle.data() + i * sizeof(double), &v, sizeof(double));
  }
  const size_t at = bytes.find(needle);
  if (at == std::string::npos) {
    std::cerr << "make_fixture: big payload not found in " << rel << "\n";
    return 1;
  }
  FlipByte(dir + "/" + rel, at + 3);
  std::cout << rel << " " << at + 3 << "\n";
  return 0;
}

int ZeroSize(const std::string& dir) {
  auto store = OpenStore(dir);
  auto w = NewWriter(store.get(), "zero");
  const int64_t cols[] = {100, 0}, rows3[] = {0, 3}, two[] = {2};
  runstore::SeriesOptions var;
  var.dtype = DType::kInt32;
  var.variable_shape = true;
  Check(w->DefineSeries("var", var), "define var");
  for (int run = 0; run < 3; ++run) {
    Check(w->Append(run, "cols", 0, ValueRef{DType::kFloat64, cols, nullptr, 0}), "cols");
    Check(w->Append(run, "rows3", 0, ValueRef{DType::kInt32, rows3, nullptr, 0}), "rows3");
  }
  const int32_t one_two[] = {1, 2};
  Check(w->Append(0, "var", 0, ValueRef{DType::kInt32, rows3, nullptr, 0}), "var");
  Check(w->Append(1, "var", 0, ValueRef::Array(one_two, two)), "var");
  Check(w->Close(), "close zero");
  return 0;
}

int CorruptHeader(const std::string& dir) {
  WriteSealedStore(dir);
  const std::string rel = OnlySegment(dir);
  FlipByte(dir + "/" + rel, 0);
  std::cout << rel << " 0\n";
  return 0;
}

int Formulas(const std::string& dir) {
  auto store = OpenStore(dir);
  auto w = NewWriter(store.get(), "formulas");
  const char* cells[] = {"=HYPERLINK(\"http://x\",\"y\")",
                         "+1+1",
                         "-1+1",
                         "@SUM(A1)",
                         "\t=1+1",
                         "\r=1+1",
                         "'=x",
                         "''-y",
                         "'plain",
                         "plain",
                         "a=b"};
  int step = 0;
  for (const char* c : cells) Check(w->Append("=cmd", "cell", step++, ValueRef::String(c)), "cell");
  Check(w->Append("-5", "cell", 0, ValueRef::String("run -5")), "cell");
  Check(w->Append(-3, "cell", 0, ValueRef::String("int run")), "cell");
  const unsigned char plus[] = {0xF8, 0x00};
  Check(w->Append("=cmd", "blob", 0,
                  ValueRef::Bytes(std::string_view(reinterpret_cast<const char*>(plus), 2))),
        "blob");
  Check(w->Append(-3, "neg", 0, -1.5), "neg");
  Check(w->Append(-3, "neg", 1, -std::numeric_limits<double>::infinity()), "neg");
  Check(w->Append(1, "Loss", 0, 1.0), "Loss");
  Check(w->Append(1, "loss", 0, 2.0), "loss");
  Check(w->Append(1, "CON", 0, 3.0), "CON");
  Check(w->Close(), "close");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_fixture good|corrupt|corrupt-header|zero-size|formulas DIR\n";
    return 1;
  }
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  if (std::filesystem::exists(dir)) {
    std::cerr << "make_fixture: " << dir << " exists; give a new directory\n";
    return 1;
  }
  if (mode == "good") return Good(dir);
  if (mode == "corrupt") return Corrupt(dir);
  if (mode == "corrupt-header") return CorruptHeader(dir);
  if (mode == "zero-size") return ZeroSize(dir);
  if (mode == "formulas") return Formulas(dir);
  std::cerr << "make_fixture: unknown mode '" << mode << "'\n";
  return 1;
}
