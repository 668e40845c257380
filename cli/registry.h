// registry.h: each subcommand of the `runstore` program adds itself to the
// command line here, beside the code that runs it: its options, its help
// footer (options.h's Footer) and the callback that chooses it (options.h's
// ChooseOnParse). main.cc builds the top-level app (its global flags and
// footer), calls these in the order `runstore --help` lists the commands,
// and runs the chosen command.
#ifndef RUNSTORE_CLI_REGISTRY_H_
#define RUNSTORE_CLI_REGISTRY_H_

#include <CLI/CLI.hpp>

#include "options.h"

namespace runstore::cli {

void RegisterInfo(CLI::App& app, ChosenCommand* chosen);     // cmd_info.cc
void RegisterLs(CLI::App& app, ChosenCommand* chosen);       // cmd_info.cc
void RegisterCat(CLI::App& app, ChosenCommand* chosen);      // cmd_cat.cc
void RegisterGet(CLI::App& app, ChosenCommand* chosen);      // cmd_get.cc
void RegisterVerify(CLI::App& app, ChosenCommand* chosen);   // cmd_verify.cc
void RegisterCompact(CLI::App& app, ChosenCommand* chosen);  // cmd_compact.cc
void RegisterCatalog(CLI::App& app, ChosenCommand* chosen);  // cmd_catalog.cc
// `export` and its commands csv, tar, parquet and zarr.
void RegisterExport(CLI::App& app, ChosenCommand* chosen);  // cmd_export.cc
// `import` and its command tar.
void RegisterImport(CLI::App& app, ChosenCommand* chosen);  // cmd_export.cc
void RegisterPlan(CLI::App& app, ChosenCommand* chosen);    // cmd_export.cc
void RegisterStatus(CLI::App& app, ChosenCommand* chosen);  // cmd_export.cc
void RegisterWatch(CLI::App& app, ChosenCommand* chosen);   // cmd_export.cc
void RegisterReport(CLI::App& app, ChosenCommand* chosen);  // cmd_export.cc
void RegisterSync(CLI::App& app, ChosenCommand* chosen);    // cmd_sync.cc

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_REGISTRY_H_
