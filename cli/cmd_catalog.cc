// `runstore catalog`: writes the store's catalog (docs/design.md#catalog), a
// cache of every sealed segment's index, so that opening a store of many
// segments reads one file instead of every segment's footer.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "registry.h"

namespace runstore::cli {
namespace {

struct CatalogOptions {
  std::string store;
  bool json = false;
};

int RunCatalog(const CatalogOptions& o) {
  constexpr std::string_view kCmd = "catalog";
  StoreOptions options;
  options.create_if_missing = false;
  options.on_damaged = g_skip_damaged ? OnDamaged::kSkip : OnDamaged::kFail;
  options.catalog_rewrite_segments = 0;  // written below, once
  const auto t0 = std::chrono::steady_clock::now();
  auto store = Store::Open(o.store, options);
  if (!store.ok()) return ReportOpenError(kCmd, store.status());
  const RefreshStats before = (*store)->last_refresh();
  auto written = (*store)->WriteCatalog();
  if (!written.ok()) return ReportError(kCmd, written.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = std::filesystem::file_size((*store)->path() + "/CATALOG", ec);
  const RefreshStats& s = (*store)->last_refresh();
  if (o.json) {
    nlohmann::ordered_json j = {{"store", (*store)->path()},
                                {"segments", s.segments},
                                {"cataloged", *written},
                                {"open", s.segments - *written},
                                {"read_from_old_catalog", before.from_catalog},
                                {"read_from_footers", before.from_footer},
                                {"bytes", ec ? 0 : bytes},
                                {"seconds", seconds}};
    std::cout << JsonPrintable(j.dump(2)) << "\n";
  } else {
    std::cout << "catalog: " << *written << " sealed segments of " << s.segments << " ("
              << before.from_catalog << " from the old catalog, " << before.from_footer
              << " from their footers), " << (ec ? 0 : bytes) << " bytes, in " << seconds << " s\n";
  }
  return FinishStdout(kCmd, kExitOk);
}

}  // namespace

void RegisterCatalog(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<CatalogOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_flag("--json", o->json,
                "Print one JSON object {store, segments, cataloged, open, "
                "read_from_old_catalog, read_from_footers, bytes, seconds}");
  cmd->footer(Footer(
      "Writes STORE/CATALOG: what opening reads of every sealed segment (its header, footer\n"
      "and trailer), so that opening a store of many segments reads that one file and stats\n"
      "each segment instead of reading each. It is a cache: an entry is used only while its\n"
      "segment's size, modification time and inode are unchanged, and a missing or damaged\n"
      "catalog only makes opening slower. A store opened for writing rewrites it when it has\n"
      "grown by a quarter; run this after a sweep, or before many jobs open the store.",
      "  runstore catalog /scratch/sweep\n"
      "  runstore catalog /scratch/sweep --json | jq .seconds"));
  ChooseOnParse(cmd, "catalog", chosen, [o] { return RunCatalog(*o); });
}

}  // namespace runstore::cli
