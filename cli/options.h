// options.h: what the subcommands' registrations (registry.h) share to build
// their part of the command line: the help footer, the integer check, and the
// hand-off of the chosen command to main.cc.
//
// Thread safety: none of this is meant for use from several threads.
#ifndef RUNSTORE_CLI_OPTIONS_H_
#define RUNSTORE_CLI_OPTIONS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <limits>
#include <string>

#include "common.h"

namespace runstore::cli {

// The text after a subcommand's options: what it does in detail, examples and
// the exit codes. (The description passed to add_subcommand is one line, as
// it also appears in the list of commands of `runstore --help`.)
std::string Footer(const std::string& details, const std::string& examples);

// Checks and rewrites the value of an integer option: decimal digits with an
// optional '-', from `min` to `max`, or a message naming the value (CLI11
// prefixes the option's name). CLI11's own conversion would take 0x10 for 16
// and 010 for 8, and clamp 99999999999999999999 silently: this runs first and
// hands it the value in plain decimal.
template <typename T>
CLI::Validator Integer(T min = std::numeric_limits<T>::min(),
                       T max = std::numeric_limits<T>::max()) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        T v{};
        const DecimalText parsed = ParseDecimal(text, &v);
        if (parsed == DecimalText::kMalformed) {
          return "'" + text + "' is not a decimal integer (expected " + range + ")";
        }
        if (parsed == DecimalText::kOutOfRange || v < min || v > max) {
          return "'" + text + "' is out of range (expected " + range + ")";
        }
        text = std::to_string(v);
        return std::string();
      },
      "");
}

// The command a command line chose: set while CLI11 parses it, by the
// callback of the subcommand given (which runs only once the whole line has
// parsed), and run by main.cc afterwards.
struct ChosenCommand {
  std::string name;          // "ls", "export csv": for messages and FinishStdout
  std::function<int()> run;  // does the work; returns the exit code (common.h)
};

// Makes `sub`, when given on the command line, set *chosen to `name` and
// `run`. `run` holds (shares) whatever its options were parsed into.
void ChooseOnParse(CLI::App* sub, std::string name, ChosenCommand* chosen,
                   std::function<int()> run);

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_OPTIONS_H_
