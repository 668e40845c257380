// `runstore compact`: merges many small sealed segments into few large ones
// (Store::Compact, docs/design.md#compaction) while writers write and
// readers read; what they read does not change.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "progress.h"
#include "registry.h"

namespace runstore::cli {
namespace {

using nlohmann::ordered_json;

struct CompactCliOptions {
  std::string store;
  bool dry_run = false;
  bool adopt_unsealed = false;
  double older_than_s = 0;
  double retain_s = CompactOptions().retain_inputs_s;
  std::string smaller_than;  // bytes, with an optional K/M/G suffix
  std::string memory = "256M";
  bool json = false;
  bool verbose = false;  // every removed file on a line of its own
};

// "123", "64K", "256M", "1G" (binary units): bytes; false for anything else.
bool ParseBytes(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(s, &used);
  } catch (...) {
    return false;
  }
  const std::string suffix = s.substr(used);
  int shift = 0;
  if (suffix == "K" || suffix == "KiB")
    shift = 10;
  else if (suffix == "M" || suffix == "MiB")
    shift = 20;
  else if (suffix == "G" || suffix == "GiB")
    shift = 30;
  else if (!suffix.empty())
    return false;
  if (n > (UINT64_MAX >> shift)) return false;
  *out = static_cast<uint64_t>(n) << shift;
  return true;
}

void PrintRetained(const CompactReport& r, double retain_s) {
  if (r.retained.empty()) return;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "kept %zu replaced segments for readers of older snapshots; a compaction %g s "
                "after their replacement removes them (--retain 0: at once)",
                r.retained.size(), retain_s);
  std::cout << buf << "\n";
}

// Segments held back by staged ones not yet published
// (docs/design.md#compaction-and-staging).
void PrintHeldBack(const CompactReport& r) {
  if (r.held_back.empty()) return;
  std::cout << "held back " << r.held_back.size()
            << " segments committed after the claim of a segment still in staging (published "
               "by its writer or by `runstore sync`): ";
  for (size_t i = 0; i < r.staged.size() && i < 3; ++i) {
    std::cout << (i ? ", " : "") << Printable(r.staged[i]);
  }
  if (r.staged.size() > 3) std::cout << " and " << r.staged.size() - 3 << " more";
  std::cout << "\n";
}

int RunCompact(const CompactCliOptions& o) {
  constexpr std::string_view kCmd = "compact";
  CompactOptions options;
  options.dry_run = o.dry_run;
  options.adopt_unsealed = o.adopt_unsealed;
  options.older_than_s = o.older_than_s;
  options.retain_inputs_s = o.retain_s;
  if (!o.smaller_than.empty() && !ParseBytes(o.smaller_than, &options.smaller_than_bytes)) {
    return ReportUsageError(kCmd, "--smaller-than: '" + o.smaller_than +
                                      "' is not a size (bytes, or a number with K, M or G)");
  }
  if (!ParseBytes(o.memory, &options.memory_bytes)) {
    return ReportUsageError(
        kCmd, "--memory: '" + o.memory + "' is not a size (bytes, or a number with K, M or G)");
  }
  if (o.older_than_s < 0) return ReportUsageError(kCmd, "--older-than must not be negative");
  if (!(o.retain_s >= 0)) return ReportUsageError(kCmd, "--retain must not be negative");
  StoreOptions so;
  so.create_if_missing = false;
  so.read_only = o.dry_run;
  auto store = Store::Open(o.store, so);
  if (!store.ok()) return ReportOpenError(kCmd, store.status());
  CompactReport r;
  Progress progress("compact", 0);
  if (progress.enabled()) {
    options.progress = [&progress](uint64_t done, uint64_t total) {
      progress.SetTotal(total);
      progress.Update(done, 0);
    };
  }
  Status s = (*store)->Compact(options, &r);
  progress.Finish();
  if (!s.ok()) return ReportError(kCmd, s);
  if (o.json) {
    ordered_json j = {{"store", o.store},
                      {"dry_run", r.dry_run},
                      {"inputs", r.inputs},
                      {"input_bytes", r.input_bytes},
                      {"input_records", r.input_records},
                      {"excluded", r.excluded},
                      {"staged", r.staged},
                      {"held_back", r.held_back},
                      {"outputs", r.outputs},
                      {"output_bytes", r.output_bytes},
                      {"output_records", r.output_records},
                      {"removed_leftovers", r.removed_leftovers},
                      {"retained", r.retained},
                      {"adopted", r.adopted},
                      {"seconds", r.seconds}};
    std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace))
              << "\n";
    return FinishStdout(kCmd, kExitOk);
  }
  char buf[256];
  // One line for what was removed (a compaction with --retain 0 after one of
  // 100,000 segments removes 100,000 files); each of them with --verbose.
  if (!r.removed_leftovers.empty()) {
    std::cout << "removed " << r.removed_leftovers.size()
              << " leftover files (replaced segments past their --retain, files of interrupted "
                 "compactions)"
              << (o.verbose ? ":" : "; --verbose lists them") << "\n";
    if (o.verbose) {
      for (const std::string& f : r.removed_leftovers) std::cout << "  " << Printable(f) << "\n";
    }
  }
  if (r.inputs.empty()) {
    std::cout << "nothing to compact";
    if (!r.excluded.empty()) std::cout << " (" << r.excluded.size() << " segments left out)";
    std::cout << "\n";
    PrintHeldBack(r);
    PrintRetained(r, o.retain_s);
    return FinishStdout(kCmd, kExitOk);
  }
  if (r.dry_run) {
    std::snprintf(buf, sizeof(buf), "would merge %zu segments (%.1f MiB, %llu records stored)",
                  r.inputs.size(), static_cast<double>(r.input_bytes) / 1048576.0,
                  static_cast<unsigned long long>(r.input_records));
    std::cout << buf << "\n";
    for (const std::string& f : r.inputs) std::cout << "  " << Printable(f) << "\n";
  } else {
    std::snprintf(buf, sizeof(buf),
                  "merged %zu segments (%.1f MiB) into %zu (%.1f MiB): %llu records, %.2f s",
                  r.inputs.size(), static_cast<double>(r.input_bytes) / 1048576.0, r.outputs.size(),
                  static_cast<double>(r.output_bytes) / 1048576.0,
                  static_cast<unsigned long long>(r.output_records), r.seconds);
    std::cout << buf << "\n";
    for (const std::string& f : r.outputs) std::cout << "  " << Printable(f) << "\n";
  }
  for (const std::string& f : r.adopted) {
    std::cout << (r.dry_run ? "would adopt " : "adopted ") << Printable(f)
              << " (unsealed: a crashed writer's, as --adopt-unsealed asserts)\n";
  }
  for (const std::string& f : r.excluded) {
    std::cout << "left out " << Printable(f)
              << " (shares runs with a segment that stays, across the merged commit's place)\n";
  }
  PrintHeldBack(r);
  PrintRetained(r, o.retain_s);
  return FinishStdout(kCmd, kExitOk);
}

}  // namespace

void RegisterCompact(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<CompactCliOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_flag("--dry-run", o->dry_run, "Say what would be merged; write nothing");
  cmd->add_flag("--verbose", o->verbose, "List every leftover file removed, one a line");
  cmd->add_flag("--adopt-unsealed", o->adopt_unsealed,
                "Also merge the unsealed segments crashed writers left (you assert that no "
                "writer writes into the store directly while this runs: a job's epilogue)");
  cmd->add_option("--older-than", o->older_than_s,
                  "Only segments created at least this many seconds ago (by their header's "
                  "creation time, from the clock of the node that wrote them)");
  cmd->add_option("--smaller-than", o->smaller_than,
                  "Only segment files smaller than this (bytes, or with K, M, G)");
  cmd->add_option("--memory", o->memory, "Memory the merge may hold (default 256M)");
  cmd->add_option("--retain", o->retain_s,
                  "Keep replaced segments this many seconds for readers of older snapshots "
                  "(default 300); a later compaction removes them; 0 removes them at once");
  cmd->add_flag(
      "--json", o->json,
      "Print one JSON object {store, dry_run, inputs, input_bytes, input_records, "
      "excluded, staged, held_back, outputs, output_bytes, output_records, removed_leftovers, "
      "retained, adopted, seconds}");
  cmd->footer(Footer(
      "Merges the store's sealed segments (never one a writer still has open) into segments\n"
      "of up to 1 GiB whose records are ordered by series, run and step, while writers go on\n"
      "writing and readers reading: every read gives the same records before, during and\n"
      "after. A segment that shares runs with one that is left out, and would move across\n"
      "its commits, is left out too (and listed). Safe to interrupt: a crash leaves the\n"
      "store as it was or compacted, and the next compact removes what was left behind.\n"
      "The segments merged stay --retain seconds (readers of newer snapshots leave them out),\n"
      "so that a reader holding an older snapshot can still read them; a compact run after\n"
      "that removes them. With --adopt-unsealed it also merges what crashed writers left\n"
      "unsealed (you assert that no writer runs; should one commit after all, the compaction\n"
      "stops counting and its inputs are read as before).",
      "  runstore compact /scratch/sweep --dry-run\n"
      "  runstore compact /scratch/sweep --older-than 3600 --smaller-than 64M --memory 1G\n"
      "  runstore compact /scratch/sweep --retain 0     # free the space at once\n"
      "  runstore compact /scratch/sweep --adopt-unsealed   # after the job: crashed writers'"));
  ChooseOnParse(cmd, "compact", chosen, [o] { return RunCompact(*o); });
}

}  // namespace runstore::cli
