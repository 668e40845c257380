#include "options.h"

#include <utility>

namespace runstore::cli {

std::string Footer(const std::string& details, const std::string& examples) {
  std::string s = "\n";
  if (!details.empty()) s += details + "\n\n";
  return s + "Examples:\n" + examples + "\n\n" + ExitCodeHelp();
}

void ChooseOnParse(CLI::App* sub, std::string name, ChosenCommand* chosen,
                   std::function<int()> run) {
  sub->callback([name = std::move(name), run = std::move(run), chosen] {
    chosen->name = name;
    chosen->run = run;
  });
}

}  // namespace runstore::cli
