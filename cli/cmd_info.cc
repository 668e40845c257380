// `runstore info` and `runstore ls`.
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.h"
#include "common.h"
#include "registry.h"
#include "runstore/text.h"

namespace runstore::cli {
namespace {

using nlohmann::ordered_json;

// Sum of the sizes of every regular file under `dir` (segments, marker,
// caches, leftovers). Files that vanish meanwhile are skipped.
uint64_t DiskBytes(const std::string& dir) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) {
      const uintmax_t n = it->file_size(fec);
      if (!fec) total += n;
    }
  }
  return total;
}

ordered_json RunToJson(const RunId& r) {
  if (r.is_int()) return r.int_value();
  return r.string_value();
}

void PrintTable(const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_align) {
  std::vector<size_t> width(rows.empty() ? 0 : rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const bool last = c + 1 == r.size();
      const std::string pad(width[c] - r[c].size(), ' ');
      if (right_align[c]) {
        line += pad + r[c];
      } else {
        line += r[c];
        if (!last) line += pad;
      }
      if (!last) line += "  ";
    }
    out += line + "\n";
  }
  std::cout << out;
}

}  // namespace

int RunInfo(const InfoOptions& o) {
  constexpr std::string_view kCmd = "info";
  int open_rc = kExitOk;
  auto store = OpenStoreForCommand(kCmd, o.store, &open_rc);
  if (store == nullptr) return open_rc;
  auto snap = store->GetSnapshot();

  const std::vector<SegmentInfo> segments = snap->ListSegments();
  std::set<std::string> writers;
  uint64_t sealed = 0, committed = 0, segment_bytes = 0, commits = 0, blocks = 0;
  for (const SegmentInfo& s : segments) {
    writers.insert(s.writer_id);
    sealed += s.sealed ? 1 : 0;
    committed += s.committed_bytes;
    segment_bytes += s.file_bytes;
    commits += s.commits;
    blocks += s.blocks;
  }
  auto series = snap->ListSeries(/*include_reserved=*/true);
  if (!series.ok()) return ReportError(kCmd, series.status());
  uint64_t user_series = 0, reserved_series = 0, records = 0;
  for (const SeriesInfo& s : *series) {
    if (!s.name.empty() && s.name[0] == '~') {
      ++reserved_series;
    } else {
      ++user_series;
      records += s.count;
    }
  }
  // Counted from the footers' run indexes where they list the runs, rather
  // than listed: a million hashed ids cost no block read and no string each.
  auto runs = snap->CountRuns();
  if (!runs.ok()) return ReportError(kCmd, runs.status());
  const uint64_t disk = DiskBytes(store->path());
  const uint32_t version = store->format_version();  // as Open read the marker
  const std::vector<DamagedSegment>& damaged = snap->DamagedSegments();

  if (o.json) {
    ordered_json j;
    j["store"] = store->path();
    j["format_version"] = version;
    j["writers"] = writers.size();
    j["segments"] = {
        {"total", segments.size()}, {"sealed", sealed}, {"open", segments.size() - sealed}};
    j["series"] = user_series;
    j["reserved_series"] = reserved_series;
    j["runs"] = *runs;
    j["records"] = records;
    j["commits"] = commits;
    j["blocks"] = blocks;
    j["bytes_on_disk"] = disk;
    j["segment_bytes"] = segment_bytes;
    j["committed_bytes"] = committed;
    // Why opening read no catalog it found (damaged, larger than it can be);
    // null when it read one or there is none.
    const Status& catalog = store->last_refresh().catalog_status;
    j["catalog_ignored"] = catalog.ok() ? ordered_json(nullptr) : ordered_json(catalog.ToString());
    // The segments left out (--skip-damaged); always empty otherwise.
    ordered_json left_out = ordered_json::array();
    for (const DamagedSegment& d : damaged) {
      left_out.push_back({{"file", d.file},
                          {"code", StatusCodeName(d.status.code())},
                          {"message", d.status.message()}});
    }
    j["damaged_segments"] = left_out;
    std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace))
              << "\n";
    return kExitOk;
  }
  auto bytes = [](uint64_t n) { return std::to_string(n) + " (" + HumanBytes(n) + ")"; };
  std::vector<std::vector<std::string>> rows = {
      {"store:", Printable(store->path())},
      {"format version:", version ? std::to_string(version) : "unknown"},
      {"writers:", std::to_string(writers.size())},
      {"segments:", std::to_string(segments.size()) + " (" + std::to_string(sealed) + " sealed, " +
                        std::to_string(segments.size() - sealed) + " open)"},
      {"series:",
       std::to_string(user_series) + " (+" + std::to_string(reserved_series) + " reserved)"},
      {"runs:", std::to_string(*runs)},
      {"records:", std::to_string(records)},
      {"commits:", std::to_string(commits)},
      {"blocks:", std::to_string(blocks)},
      {"bytes on disk:", bytes(disk)},
      {"segment bytes:", bytes(segment_bytes)},
      {"committed bytes:", bytes(committed)},
  };
  if (const Status& c = store->last_refresh().catalog_status; !c.ok()) {
    rows.push_back({"catalog:", "ignored, every segment read instead: " + c.ToString()});
  }
  if (!damaged.empty()) {
    rows.push_back({"damaged segments:", std::to_string(damaged.size()) + " (left out)"});
    for (const DamagedSegment& d : damaged) {
      rows.push_back({"", Printable(d.file + ": " + DamageText(d))});
    }
  }
  PrintTable(rows, {false, false});
  return kExitOk;
}

int RunLs(const LsOptions& o) {
  constexpr std::string_view kCmd = "ls";
  int open_rc = kExitOk;
  auto store = OpenStoreForCommand(kCmd, o.store, &open_rc);
  if (store == nullptr) return open_rc;
  auto snap = store->GetSnapshot();

  if (o.runs) {
    auto runs = snap->ListRuns();
    if (!runs.ok()) return ReportError(kCmd, runs.status());
    if (o.json) {
      ordered_json j = ordered_json::array();
      for (const RunId& r : *runs) j.push_back(RunToJson(r));
      std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace))
                << "\n";
    } else {
      std::string out;
      for (const RunId& r : *runs) out += Printable(r.ToString()) + "\n";
      std::cout << out;
    }
    return kExitOk;
  }

  auto series = snap->ListSeries(o.all);
  if (!series.ok()) return ReportError(kCmd, series.status());
  if (o.json) {
    ordered_json j = ordered_json::array();
    for (const SeriesInfo& s : *series) {
      j.push_back({{"name", s.name},
                   {"dtype", DTypeName(s.dtype)},
                   {"shape", s.shape},
                   {"variable_shape", s.variable_shape},
                   {"count", s.count},
                   {"stored_bytes", s.stored_bytes}});
    }
    std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace))
              << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "COUNT", "BYTES"}};
  for (const SeriesInfo& s : *series) {
    rows.push_back({Printable(s.name), std::string(DTypeName(s.dtype)), ShapeText(s),
                    std::to_string(s.count), std::to_string(s.stored_bytes)});
  }
  PrintTable(rows, {false, false, false, true, true});
  return kExitOk;
}

void RegisterInfo(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<InfoOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->footer(Footer(
      "Prints the store's format version, the number of writers (distinct writer ids), of\n"
      "segments (sealed and open), series (and reserved '~' series), runs, visible records,\n"
      "commits and blocks, the bytes on disk (every file under the store), the bytes of the\n"
      "segment files, and the committed bytes (up to each segment's last valid commit).\n"
      "With --skip-damaged, also the segments left out as damaged, with their errors\n"
      "(--json: \"damaged_segments\": [{file, code, message}], always present).",
      "  runstore info /scratch/sweep\n"
      "  runstore info /scratch/sweep --json | jq .records"));
  ChooseOnParse(cmd, "info", chosen, [o] { return RunInfo(*o); });
}

void RegisterLs(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<LsOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_flag("--runs", o->runs, "List run ids instead of series");
  cmd->add_flag("--json", o->json,
                "Print a JSON array: of objects {name, dtype, shape (a list, [] for scalars), "
                "variable_shape, count, stored_bytes}, or with --runs of run ids (numbers "
                "and strings)");
  cmd->add_flag("--all,-a", o->all,
                "Include series reserved for runstore (names starting with '~')");
  cmd->footer(Footer(
      "Lists every series with its dtype, the shape of each record (\"scalar\", \"[3, 4]\" or\n"
      "\"variable\"), the number of visible records and the bytes its blocks take on disk,\n"
      "sorted by name. With --runs, lists the run ids instead (integers first, then strings),\n"
      "one per line.",
      "  runstore ls /scratch/sweep\n"
      "  runstore ls /scratch/sweep --runs | wc -l\n"
      "  runstore ls /scratch/sweep --all --json"));
  ChooseOnParse(cmd, "ls", chosen, [o] { return RunLs(*o); });
}

}  // namespace runstore::cli
