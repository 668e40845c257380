// `runstore sync STAGING_DIR STORE`: ships what staging writers left in a
// node-local staging directory into the store (runstore/sync.h,
// docs/design.md#staging) and reports what it shipped, found published,
// skipped (a live writer's) and cleaned.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common.h"
#include "progress.h"
#include "registry.h"
#include "runstore/sync.h"

namespace runstore::cli {
namespace {

using nlohmann::ordered_json;

struct SyncCommandOptions {
  std::string staging_dir;
  std::string store;
  double wait_s = 5;
  bool force = false;
  bool json = false;
};

int RunSync(const SyncCommandOptions& o) {
  constexpr std::string_view kCmd = "sync";
  SyncOptions so;
  so.wait_s = o.wait_s;
  so.force = o.force;
  SyncReport r;
  Progress progress("sync", 0);
  if (progress.enabled()) {
    so.progress = [&progress, wait_s = o.wait_s](size_t done, size_t total, uint64_t bytes) {
      if (total == 0 && done == 0) {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "watching the writers' leases for %g s", wait_s);
        progress.Spin(buf);
        return;
      }
      progress.SetTotal(total);
      progress.Update(done, bytes);
    };
  }
  const Status s = SyncStaging(o.staging_dir, o.store, so, &r);
  progress.Finish();
  if (o.json) {
    ordered_json j = {{"staging_dir", o.staging_dir},
                      {"store", o.store},
                      {"ok", s.ok()},
                      {"shipped", r.shipped},
                      {"already_published", r.already_published},
                      {"skipped", r.skipped},
                      {"cleaned", r.cleaned},
                      {"damaged_leases", r.damaged_leases},
                      {"bytes_shipped", r.bytes_shipped}};
    if (!s.ok()) j["error"] = {{"code", StatusCodeName(s.code())}, {"message", s.message()}};
    std::cout << JsonPrintable(j.dump(2, ' ', false, ordered_json::error_handler_t::replace))
              << "\n";
  } else {
    for (const std::string& n : r.shipped) std::cout << "shipped " << Printable(n) << "\n";
    for (const std::string& n : r.already_published) {
      std::cout << "already published " << Printable(n) << "\n";
    }
    for (const std::string& n : r.skipped)
      std::cout << "skipped " << Printable(n) << " (its writer is alive)\n";
    for (const std::string& n : r.cleaned) std::cout << "cleaned " << Printable(n) << "\n";
    for (const std::string& n : r.damaged_leases)
      std::cout << "not a lease, left alone: " << Printable(n) << "\n";
    const bool did_something = !r.shipped.empty() || !r.already_published.empty() ||
                               !r.skipped.empty() || !r.cleaned.empty();
    if (s.ok() || did_something) {
      std::cout << (s.ok() ? "ok: " : "stopped: ") << r.shipped.size() << " shipped ("
                << r.bytes_shipped << " bytes), " << r.already_published.size()
                << " already published, " << r.skipped.size() << " skipped, " << r.cleaned.size()
                << " cleaned\n";
    }
  }
  if (!s.ok()) return ReportError(kCmd, s);
  return kExitOk;
}

}  // namespace

void RegisterSync(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<SyncCommandOptions>();
  cmd->add_option("STAGING_DIR", o->staging_dir, "Staging directory (WriterOptions::staging_dir)")
      ->required();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  CLI::Option* wait =
      cmd->add_option("--wait", o->wait_s,
                      "Seconds to watch the writers' leases: a writer whose lease does not change "
                      "meanwhile is taken for dead (default 5; the leases beat every 0.5 s)")
          ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--force", o->force,
                "Take every writer for dead without watching: only when no writer can be using "
                "the staging directory (e.g. in a job's epilogue)")
      ->excludes(wait);
  cmd->add_flag("--json", o->json,
                "Print one JSON object {staging_dir, store, ok, shipped, already_published, "
                "skipped, cleaned, damaged_leases, bytes_shipped, and when not ok error: {code, "
                "message}}");
  cmd->footer(Footer(
      "Ships every sealed segment a crashed or preempted writer left in STAGING_DIR into\n"
      "STORE, and the committed prefix of an unsealed one (it then reads as a crashed\n"
      "writer's segment), then removes them from staging. The open segment of a writer\n"
      "that is still alive (its lease changes while sync watches) is skipped. Temporaries of\n"
      "crashed publications and syncs are removed. Idempotent: running it again, or on two\n"
      "nodes at once, publishes nothing twice and never replaces a published segment.",
      "  runstore sync /local/scratch/staging /shared/sweep\n"
      "  runstore sync --force $TMPDIR/staging /shared/sweep   # in a job epilogue"));
  ChooseOnParse(cmd, "sync", chosen, [o] { return RunSync(*o); });
}

}  // namespace runstore::cli
