// registry.h: the command line of the `runstore` program, built from the
// table of its commands (cli/commands.tsv, the one statement of each
// command's name, engine, summary and whether it writes to a store; CMake
// makes it the rows of kCommandTable). main.cc creates each command the
// table lists, in its order; a command of the tool then adds its options
// beside the code that runs it (these Register functions: its options, its
// help footer, options.h's Footer, and the callback that chooses it,
// options.h's ChooseOnParse); a command of a Python engine is listed and says
// where it is done (RegisterDoneInPython).
#ifndef RUNSTORE_CLI_REGISTRY_H_
#define RUNSTORE_CLI_REGISTRY_H_

#include <CLI/CLI.hpp>
#include <string_view>

#include "options.h"

namespace runstore::cli {

// A row of cli/commands.tsv ("" for its cells "-").
struct CommandRow {
  const char* path;     // "info", "export csv"
  const char* engine;   // "tool", "group", or "module:function" of the Python package
  const char* writes;   // "yes": it may write to a store; "no": it opens stores read-only
  const char* install;  // what to install for a Python engine
  const char* summary;  // one line, as `runstore --help` lists it
  const char* usage;    // a Python engine's usage line
};

inline constexpr CommandRow kCommandTable[] = {
#include "commands_table.inc"
};

inline bool IsTool(const CommandRow& row) { return std::string_view(row.engine) == "tool"; }
inline bool IsGroup(const CommandRow& row) { return std::string_view(row.engine) == "group"; }
inline bool Writes(const CommandRow& row) { return std::string_view(row.writes) == "yes"; }

void RegisterInfo(CLI::App* cmd, ChosenCommand* chosen);       // cmd_info.cc
void RegisterLs(CLI::App* cmd, ChosenCommand* chosen);         // cmd_info.cc
void RegisterCat(CLI::App* cmd, ChosenCommand* chosen);        // cmd_cat.cc
void RegisterGet(CLI::App* cmd, ChosenCommand* chosen);        // cmd_get.cc
void RegisterVerify(CLI::App* cmd, ChosenCommand* chosen);     // cmd_verify.cc
void RegisterCompact(CLI::App* cmd, ChosenCommand* chosen);    // cmd_compact.cc
void RegisterCatalog(CLI::App* cmd, ChosenCommand* chosen);    // cmd_catalog.cc
void RegisterExport(CLI::App* cmd, ChosenCommand* chosen);     // cmd_export.cc (the group)
void RegisterExportCsv(CLI::App* cmd, ChosenCommand* chosen);  // cmd_export.cc
void RegisterSync(CLI::App* cmd, ChosenCommand* chosen);       // cmd_sync.cc

// A command of a Python engine: it takes any arguments (its engine parses
// them), its help says where it is done and how to get it, and run by this
// tool it says so and exits with 5, starting no Python behind the user's back.
void RegisterDoneInPython(CLI::App* cmd, const CommandRow& row, ChosenCommand* chosen);

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_REGISTRY_H_
