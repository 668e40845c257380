// `runstore verify`: reads every block of every segment and checks every
// checksum (Snapshot::VerifyAll), reporting every problem found. It always
// opens the store with OnDamaged::kSkip, so that a damaged or unreadable
// segment is one problem among the others rather than the end of the check.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "progress.h"
#include "registry.h"

namespace runstore::cli {
namespace {

using nlohmann::ordered_json;

ordered_json ErrorJson(const Status& s) {
  return {{"code", StatusCodeName(s.code())}, {"message", s.message()}};
}

}  // namespace

namespace {

// What verify found, as both of its outputs say it.
struct Verdict {
  std::string store;
  size_t segments = 0;
  uint64_t blocks = 0;
  std::vector<DamagedSegment> damaged;
  VerifyReport report;
  Status status;               // the first problem, or OK
  std::string unchecked_line;  // "could not check N segments: ...", or empty
};

void PrintJson(const Verdict& v) {
  const VerifyReport& report = v.report;
  ordered_json j = {{"store", v.store},
                    {"ok", v.status.ok() && report.unchecked.empty()},
                    {"segments", v.segments},
                    {"blocks", v.blocks},
                    {"blocks_checked", report.blocks_checked},
                    {"bytes_checked", report.bytes_checked}};
  ordered_json left_out = ordered_json::array();
  for (const DamagedSegment& d : v.damaged) {
    ordered_json e = ErrorJson(d.status);
    e["file"] = d.file;
    left_out.push_back(e);
  }
  j["damaged_segments"] = left_out;
  ordered_json unchecked = ordered_json::array();
  for (const Status& u : report.unchecked) unchecked.push_back(ErrorJson(u));
  j["unchecked"] = unchecked;
  if (!v.status.ok()) {
    j["error"] = ErrorJson(v.status);
    ordered_json all = ordered_json::array();
    for (const Status& p : report.problems) all.push_back(ErrorJson(p));
    j["problems"] = all;
  } else if (!report.unchecked.empty()) {
    j["error"] = ErrorJson(Status(report.unchecked.front().code(), v.unchecked_line));
  }
  std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace)) << "\n";
}

void PrintText(const Verdict& v) {
  const VerifyReport& report = v.report;
  const uint64_t checked = report.blocks_checked;
  if (v.status.ok() && report.unchecked.empty()) {
    std::cout << "ok: " << v.segments << " segments, " << checked
              << " blocks checked, no corruption\n";
  } else if (v.status.ok()) {
    std::cout << "INCOMPLETE: " << v.segments << " segments, " << checked << " of " << v.blocks
              << " blocks checked, no corruption found; " << Printable(v.unchecked_line) << "\n";
    for (const Status& u : report.unchecked) std::cout << "  " << Printable(u.ToString()) << "\n";
  } else {
    std::cout << "CORRUPT: " << v.segments << " segments";
    if (!v.damaged.empty()) std::cout << " (and " << v.damaged.size() << " damaged, left out)";
    std::cout << ", " << checked << " of " << v.blocks << " blocks checked, "
              << report.problems.size() << " problem(s):\n";
    for (const Status& p : report.problems) {
      // Damaged segments may be unreadable (IOError) rather than corrupt.
      std::cout << "  "
                << Printable(p.code() == StatusCode::kCorruption ? p.message() : p.ToString())
                << "\n";
    }
    if (!v.unchecked_line.empty()) std::cout << "and " << Printable(v.unchecked_line) << "\n";
  }
}

// Every block of the store checked, with a progress line.
Verdict Check(Store& store) {
  Verdict v;
  v.store = store.path();
  auto snap = store.GetSnapshot();
  const auto segments = snap->ListSegments();
  v.segments = segments.size();
  v.damaged = snap->DamagedSegments();
  for (const auto& s : segments) v.blocks += s.blocks;
  {
    Progress progress("verify", 0);
    v.report = snap->VerifyAll([&](uint64_t done, uint64_t total) {
      if (progress.enabled()) {
        char buf[160];
        std::snprintf(
            buf, sizeof(buf), "%3.0f%% of %.1f MiB in %zu segments",
            total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
            static_cast<double>(total) / 1048576.0, segments.size());
        progress.Spin(buf);
      }
    });
  }
  const VerifyReport& report = v.report;
  v.status = report.problems.empty() ? Status::OK() : report.problems.front();
  // Segments left unchecked for want of a resource: no damage, but no
  // verdict on them either.
  if (!report.unchecked.empty()) {
    const Status& first = report.unchecked.front();
    const std::string what = ResourceText(first);
    v.unchecked_line = "could not check " + std::to_string(report.unchecked.size()) + " segment" +
                       (report.unchecked.size() == 1 ? "" : "s") + ": " +
                       (what.empty() ? first.message() : what);
  }
  return v;
}

}  // namespace

int RunVerify(const VerifyOptions& o) {
  constexpr std::string_view kCmd = "verify";
  auto store = OpenStoreReadOnly(o.store, /*skip_damaged=*/true);
  if (!store.ok()) {
    // A corrupt segment header or index makes Open itself fail: the same
    // report as corruption found while reading blocks.
    if (o.json) {
      ordered_json j = {{"store", o.store},    {"ok", false},
                        {"segments", nullptr}, {"blocks", nullptr},
                        {"blocks_checked", 0}, {"error", ErrorJson(store.status())}};
      std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace))
                << "\n";
    } else if (store.status().code() == StatusCode::kCorruption) {
      std::cout << "CORRUPT: the store could not be opened\n";
    }
    return ReportError(kCmd, store.status());
  }
  const Verdict v = Check(**store);
  if (o.json) {
    PrintJson(v);
  } else {
    PrintText(v);
  }
  // Any problem is corruption of the store, a segment that cannot be read
  // too; segments left unchecked for want of a resource are not, and have
  // their own exit code.
  if (!v.status.ok()) {
    ReportError(kCmd, v.status);
    return kExitCorruption;
  }
  if (!v.report.unchecked.empty()) {
    return ReportError(
        kCmd, Status(StatusCode::kResourceExhausted,
                     v.unchecked_line + " (" + v.report.unchecked.front().message() + ")"));
  }
  return kExitOk;
}

void RegisterVerify(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<VerifyOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_flag("--json", o->json,
                "Print one JSON object {store, ok, segments, blocks, blocks_checked, "
                "bytes_checked, damaged_segments: [{code, message, file}], unchecked: "
                "[{code, message}], and when not ok error: {code, message} (the first problem) "
                "and problems: [...]}");
  cmd->footer(Footer(
      "Reads every block of every segment and checks every checksum, then prints the number\n"
      "of segments and blocks checked. It goes on past problems and prints every one, each\n"
      "naming the segment file and the offset, then exits with 2. A segment file that cannot\n"
      "be read at all (a damaged header or index, a file that cannot be opened) is one of\n"
      "the problems: verify always reads around it, as --skip-damaged does. Segments it could\n"
      "not check because the process ran out of file descriptors or memory are no damage:\n"
      "it says 'could not check N segments: out of file descriptors ...' and, when it found\n"
      "no problem, exits with 6.",
      "  runstore verify /scratch/sweep && echo clean\n"
      "  runstore verify /scratch/sweep --json | jq .error.message"));
  ChooseOnParse(cmd, "verify", chosen, [o] { return RunVerify(*o); });
}

}  // namespace runstore::cli
