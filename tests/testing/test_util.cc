#include "testing/test_util.h"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "util/hash.h"

namespace runstore::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/runstore-test-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

uint64_t TestSeed() {
  const char* env = std::getenv("RUNSTORE_SEED");
  uint64_t seed =
      env ? std::strtoull(env, nullptr, 10)
          : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                static_cast<uint64_t>(getpid());
  std::printf("[ seed     ] RUNSTORE_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

long MappedSegmentKib(const std::string& dir) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string prefix = std::filesystem::canonical(dir).string() + "/segments/";
  bool ours = false;
  long kib = 0;
  for (std::string line; std::getline(smaps, line);) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash < line.find(' ') && std::isxdigit(line[0])) {
      ours = line.find(prefix) != std::string::npos;  // a mapping's first line
    } else if (ours && line.rfind("Rss:", 0) == 0) {
      kib += std::strtol(line.c_str() + 4, nullptr, 10);
    }
  }
  return kib;
}

std::string HashedId(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "e%016llx",
                static_cast<unsigned long long>(Checksum(&i, sizeof i)));
  return buf;
}

RecordValue RecordValueAt(const ScanBatch& b, size_t i) {
  RecordValue v;
  if (b.records.empty()) {
    const size_t rb = b.values.nbytes() / b.count;
    v.dtype = b.values.dtype();
    v.shape.assign(b.values.shape().begin() + 1, b.values.shape().end());
    v.bytes.assign(b.values.data() + i * rb, rb);
  } else {
    const Value& r = b.records[i];
    v.dtype = r.dtype();
    v.shape = r.shape();
    v.bytes.assign(r.data(), r.nbytes());
  }
  return v;
}

Result<Contents> ScanAll(const Snapshot& snap, const std::set<std::string>* series) {
  std::set<std::string> all;
  if (!series) {
    RUNSTORE_ASSIGN_OR_RETURN(auto infos, snap.ListSeries(/*include_reserved=*/true));
    for (const SeriesInfo& info : infos) all.insert(info.name);
    series = &all;
  }
  Contents out;
  for (const std::string& name : *series) {
    auto scanner = snap.Scan(name);
    if (!scanner.ok()) {
      if (scanner.status().code() == StatusCode::kNotFound) continue;
      return scanner.status();
    }
    ScanBatch b;
    while (true) {
      RUNSTORE_ASSIGN_OR_RETURN(bool more, (*scanner)->Next(&b));
      if (!more) break;
      for (size_t i = 0; i < b.count; ++i) {
        RecordKey k{name, b.run(i), b.steps[i]};
        if (!out.emplace(k, RecordValueAt(b, i)).second) {
          return Status::Corruption("scan returned " + KeyString(k) + " twice");
        }
      }
    }
  }
  return out;
}

std::string DiffContents(const Contents& expected, const Contents& actual) {
  std::string out;
  int shown = 0;
  auto note = [&](const std::string& s) {
    if (shown++ < 8) out += "\n    " + s;
  };
  for (const auto& [k, v] : expected) {
    auto it = actual.find(k);
    if (it == actual.end()) {
      note("missing " + KeyString(k));
    } else if (!(it->second == v)) {
      note("wrong value for " + KeyString(k));
    }
  }
  for (const auto& [k, v] : actual) {
    if (!expected.count(k)) note("unexpected " + KeyString(k));
  }
  if (shown > 8) out += "\n    ... " + std::to_string(shown - 8) + " more";
  return out;
}

}  // namespace runstore::testing
