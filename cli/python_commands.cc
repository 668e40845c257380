// The commands of `runstore` that the Python package's runstore command does
// (cli/commands.tsv names each and its engine): this tool lists them, so that
// its help is the whole command line, and run on its own says where they are
// done. Their options are declared once, by their engine.
#include <string>

#include "common.h"
#include "registry.h"

namespace runstore::cli {

void RegisterDoneInPython(CLI::App* cmd, const CommandRow& row, ChosenCommand* chosen) {
  // Everything after the command is its engine's (the global flags too):
  // none of it is a usage error here, and --help right after it is this one.
  cmd->fallthrough(false);
  cmd->allow_extras();
  cmd->prefix_command();
  const std::string path = row.path, install = row.install, usage = row.usage;
  cmd->footer(Footer(
      "Done by the Python package's runstore command (" + install +
          "), which hands every other command to this tool. Its options are its own: run\n"
          "'runstore " +
          path +
          " --help' in that environment. This tool on its own lists it, and run, says where\n"
          "it is done and exits with 5.",
      "  " + usage));
  ChooseOnParse(cmd, path, chosen, [path, install, usage] {
    return ReportError(
        path, Status::NotSupported("the C++ runstore tool on its own does not do '" + path +
                                   "'; it is done by the Python package's runstore command: " +
                                   install + ", then run '" + usage + "' from that environment"));
  });
}

}  // namespace runstore::cli
