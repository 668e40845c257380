// `runstore get`: one value to a .npy file, its bytes streamed straight from
// the (usually zero-copy, mapped) Value after a hand-written header.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "commands.h"
#include "common.h"
#include "npy.h"
#include "registry.h"

namespace runstore::cli {

int RunGet(const GetOptions& o) {
  constexpr std::string_view kCmd = "get";
  const Result<RunId> run = ParseRunArg(o.run, o.run_is_string, "RUN");
  if (!run.ok()) return ReportUsageError(kCmd, run.status().message());
  const bool to_stdout = o.out == "-";
  if (to_stdout && isatty(STDOUT_FILENO) == 1) {
    // A string value's bytes would reach the terminal raw, control characters too.
    return ReportUsageError(kCmd,
                            "standard output is a terminal, and a .npy file is not text: "
                            "redirect it (-o - > FILE.npy) or give a file (-o FILE.npy)");
  }
  int open_rc = kExitOk;
  auto store = OpenStoreForCommand(kCmd, o.store, &open_rc);
  if (store == nullptr) return open_rc;
  if (!to_stdout) {
    Status s = CheckOutsideStore(o.store, o.out);
    if (s.ok()) s = CheckMayCreate(o.out, o.force);
    if (!s.ok()) return ReportError(kCmd, s);
  }
  auto snap = store->GetSnapshot();
  auto value = snap->Get(*run, o.name, o.step);
  if (!value.ok()) return ReportError(kCmd, value.status());
  auto layout = PlanNpy(value->dtype(), value->shape(), value->nbytes());
  if (!layout.ok()) return ReportError(kCmd, layout.status());

  // A file is written under a temporary name and renamed into place, so that
  // a failure never leaves a truncated OUT.npy behind.
  const std::string tmp = o.out + ".tmp-" + std::to_string(getpid());
  std::unique_ptr<Output> file;
  Output stdout_out;
  Output* out = &stdout_out;
  if (!to_stdout) {
    auto f = Output::Create(tmp, o.out);
    if (!f.ok()) return ReportError(kCmd, f.status());
    file = std::move(f).value();
    out = file.get();
  }
  out->Write(layout->header);
  out->WriteDirect(value->data(), value->nbytes());
  if (layout->zero_padding > 0) out->Write(std::string(layout->zero_padding, '\0'));
  Status s = out->Close();
  if (s.ok() && !to_stdout) s = PlaceFile(tmp, o.out, o.force);
  if (!s.ok()) {
    if (!to_stdout) std::remove(tmp.c_str());
    return ReportError(kCmd, s);
  }
  return kExitOk;
}

void RegisterGet(CLI::App* cmd, ChosenCommand* chosen) {
  auto o = std::make_shared<GetOptions>();
  cmd->add_option("STORE", o->store, "Store directory")->required();
  cmd->add_option("RUN", o->run,
                  "Run id: an integer if all of it is one, a string if it does not start like a "
                  "number; one that starts like a number but is not an integer (1x, 1.5) is "
                  "refused: use --run-str for it")
      ->required();
  cmd->add_option("NAME", o->name, "Series name")->required();
  cmd->add_flag("--run-str", o->run_is_string,
                "Take RUN as a string even if it looks like an integer");
  cmd->add_option("--step,-s", o->step, "Step of the record")
      ->transform(Integer<int64_t>())
      ->capture_default_str();
  cmd->add_option("--output,-o", o->out,
                  "Output .npy file ('-' for standard output); not inside the store")
      ->required();
  cmd->add_flag("--force,-f", o->force, "Replace the output file if it exists");
  cmd->footer(Footer(
      "Writes the value of the record (RUN, NAME, step) to a NumPy .npy file (format 1.0,\n"
      "data aligned to 64 bytes), streaming its bytes from the store without a copy. The file\n"
      "is written under a temporary name and renamed into place when complete; an existing\n"
      "file is replaced only with --force, and a file inside the store is refused.\n"
      "Numeric values keep their dtype and shape ('<f8', '|b1', '<i4', ...). A string value\n"
      "becomes a 0-d '|S<n>' array of its UTF-8 bytes (np.load(f)[()].decode() gives the\n"
      "str); a bytes value becomes a 1-d uint8 ('|u1') array of its length, which keeps\n"
      "trailing NUL bytes that '|S' would drop.",
      "  runstore get /scratch/sweep 42 trace --step 3 -o trace.npy\n"
      "  runstore get /scratch/sweep exp-7 label --run-str -o label.npy\n"
      "  python -c 'import numpy; print(numpy.load(\"trace.npy\").shape)'"));
  ChooseOnParse(cmd, "get", chosen, [o] { return RunGet(*o); });
}

}  // namespace runstore::cli
