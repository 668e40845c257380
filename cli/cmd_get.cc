// `runstore get`: one value to a .npy file, its bytes streamed straight from
// the (usually zero-copy, mapped) Value after a hand-written header.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "common.h"
#include "npy.h"

namespace runstore::cli {

int RunGet(const GetOptions& o) {
  constexpr std::string_view kCmd = "get";
  const Result<RunId> run = ParseRunArg(o.run, o.run_is_string, "RUN");
  if (!run.ok()) return ReportUsageError(kCmd, run.status().message());
  const bool to_stdout = o.out == "-";
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

}  // namespace runstore::cli
