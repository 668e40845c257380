// runstore: the command-line tool for looking into runstore stores.
//
// Builds the top-level command line (its global flags and help) and every
// command of the table of commands (registry.h, cli/commands.tsv, which also
// says which commands write to a store), parses with CLI11 and runs the
// command chosen. Exit codes: common.h (and every --help).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"
#include "options.h"
#include "progress.h"
#include "registry.h"

namespace runstore::cli {
namespace {

// For a command line that CLI11 refused: the message for its first word that
// names no command ("runstore frobnicate", "runstore export xml"), listing
// the commands there are; empty if every command word is known.
std::string UnknownCommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* level = &app;
  std::string path = "runstore";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.starts_with("-")) continue;  // the options before commands take no values
    const auto subs = level->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return "";  // the arguments of a command
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* sub : subs) {
      if (sub->get_name() == word) next = sub;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (next == nullptr) {
      return "runstore: unknown command '" + (level == &app ? "" : path.substr(9) + " ") + word +
             "'; the commands of '" + path + "' are: " + names + "\nRun '" + path +
             " --help' for more information.\n";
    }
    level = next;
    path += " " + word;
  }
  return "";
}

// The commands of the table that may write to a store, as the help lists
// them: "compact, catalog, import tar and sync".
std::string CommandsThatWrite() {
  std::vector<std::string> names;
  for (const CommandRow& row : kCommandTable) {
    // A group that writes is named by its commands that write.
    if (Writes(row) && !IsGroup(row)) names.push_back(row.path);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return out;
}

// Creates every command of the table under `app` (a command "export csv"
// under its group "export"), each configured by the code of its engine.
void BuildCommands(CLI::App& app, ChosenCommand* chosen) {
  using Register = void (*)(CLI::App*, ChosenCommand*);
  std::map<std::string, Register> tool = {
      {"info", RegisterInfo},       {"ls", RegisterLs},
      {"cat", RegisterCat},         {"get", RegisterGet},
      {"verify", RegisterVerify},   {"compact", RegisterCompact},
      {"catalog", RegisterCatalog}, {"export", RegisterExport},
      {"sync", RegisterSync},       {"export csv", RegisterExportCsv},
  };
  for (const CommandRow& row : kCommandTable) {
    const std::string path = row.path;
    CLI::App* parent = &app;
    std::string name = path;
    if (const size_t space = path.rfind(' '); space != std::string::npos) {
      parent = app.get_subcommand(path.substr(0, space));  // throws if the group is not before
      name = path.substr(space + 1);
    }
    CLI::App* cmd = parent->add_subcommand(name, row.summary);
    if (IsGroup(row)) cmd->require_subcommand(1);
    if (IsTool(row) || IsGroup(row)) {
      auto it = tool.find(path);
      if (it != tool.end()) {
        it->second(cmd, chosen);
        tool.erase(it);
      } else if (IsTool(row)) {
        throw std::logic_error("cli/commands.tsv: the tool has no code for '" + path + "'");
      }
    } else {
      RegisterDoneInPython(cmd, row, chosen);
    }
  }
  if (!tool.empty()) {
    throw std::logic_error("cli/commands.tsv does not list '" + tool.begin()->first + "'");
  }
}

// Parses the command line and runs the command; sets *command to its name
// ("ls", "export csv") once that is known, for FinishStdout.
int Main(int argc, char** argv, std::string* command) {
  CLI::App app{
      "runstore: inspect and export runstore stores (results of large parallel computations).\n"
      "Only " +
          CommandsThatWrite() +
          " may write to a store; every other command opens it\n"
          "read-only and never writes to it. A store with a damaged or unreadable segment file\n"
          "is refused, naming the file (exit code 2 or 4); with --skip-damaged every command\n"
          "reads the other segments and prints 'runstore: left out damaged segment FILE: ERROR'\n"
          "on stderr for each one left out.",
      "runstore"};
  app.set_version_flag("--version", std::string("runstore ") + RUNSTORE_CLI_VERSION +
                                        " (reads store format versions 1 to " +
                                        std::to_string(kFormatVersion) + ")");
  app.require_subcommand(1);
  // The global flags may also follow the command: `runstore info STORE --skip-damaged`.
  app.fallthrough();
  app.add_flag("--no-progress", g_progress_disabled,
               "Never draw a progress bar (one is drawn on stderr only when it is a terminal)");
  app.add_flag("--skip-damaged", g_skip_damaged,
               "Read a store around segment files that cannot be read (damaged bytes, or a file "
               "that cannot be opened): leave them out, as if they did not exist, and name each "
               "on stderr. Without it such a store is refused, since leaving a segment out can "
               "bring back values it overwrote and records its resume markers hid");
  app.footer(Footer("",
                    "  runstore info /scratch/sweep\n"
                    "  runstore ls /scratch/sweep\n"
                    "  runstore cat /scratch/sweep loss --format csv > loss.csv\n"
                    "  runstore get /scratch/sweep 42 trace --step 3 -o trace.npy\n"
                    "  runstore verify /scratch/sweep\n"
                    "  runstore info /scratch/sweep --skip-damaged\n"
                    "  runstore export csv /scratch/sweep out/\n"
                    "  runstore export tar /scratch/sweep results.tar.gz\n"
                    "  runstore report /scratch/sweep -o report.html\n"
                    "  runstore sync /local/staging /scratch/sweep\n"
                    "Run 'runstore COMMAND --help' for the details of a command."));

  ChosenCommand chosen;
  BuildCommands(app, &chosen);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (const std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
        std::cerr << unknown;
        return kExitUsage;
      }
    }
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (!chosen.run) return kExitUsage;
  *command = chosen.name;
  return chosen.run();
}

}  // namespace
}  // namespace runstore::cli

int main(int argc, char** argv) {
  using runstore::cli::kExitOther;
  std::string command;
  int rc;
  try {
    rc = runstore::cli::Main(argc, argv, &command);
  } catch (const std::filesystem::filesystem_error& e) {
    rc = runstore::cli::ReportError("error", runstore::Status::IOError(e.what(), e.code().value()));
  } catch (const std::bad_alloc&) {
    rc = runstore::cli::ReportError(command,
                                    runstore::Status::ResourceExhausted("out of memory", ENOMEM));
  } catch (const std::exception& e) {
    std::cerr << "runstore: error: " << runstore::text::Printable(e.what()) << "\n";
    rc = kExitOther;
  }
  // Every command (and --help) succeeds only if what it printed was written.
  return runstore::cli::FinishStdout(command, rc);
}
