// `runstore verify`: reads every block of every segment and checks every
// checksum (Snapshot::Verify).
#include <chrono>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "progress.h"

namespace runstore::cli {
namespace {

using nlohmann::ordered_json;

ordered_json ErrorJson(const Status& s) {
  return {{"code", StatusCodeName(s.code())}, {"message", s.message()}};
}

}  // namespace

int RunVerify(const VerifyOptions& o) {
  constexpr std::string_view kCmd = "verify";
  auto store = OpenStoreReadOnly(o.store);
  if (!store.ok()) {
    // A corrupt segment header or index makes Open itself fail: the same
    // report as corruption found while reading blocks.
    if (o.json) {
      ordered_json j = {{"store", o.store},    {"ok", false},
                        {"segments", nullptr}, {"blocks", nullptr},
                        {"blocks_checked", 0}, {"error", ErrorJson(store.status())}};
      std::cout << j.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
    } else if (store.status().code() == StatusCode::kCorruption) {
      std::cout << "CORRUPT: the store could not be opened\n";
    }
    return ReportError(kCmd, store.status());
  }
  auto snap = (*store)->GetSnapshot();
  const auto segments = snap->ListSegments();
  uint64_t blocks = 0;
  for (const auto& s : segments) blocks += s.blocks;

  uint64_t checked = 0;
  Status status;
  if (ProgressAllowed()) {
    // Verify has no progress callback: run it on a thread and show a spinner
    // with the elapsed time meanwhile.
    Progress progress("verify", 0);
    const auto start = std::chrono::steady_clock::now();
    auto done = std::async(std::launch::async, [&] { return snap->Verify(&checked); });
    while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char buf[128];
      std::snprintf(buf, sizeof(buf), "checking %llu blocks in %zu segments, %.0f s",
                    static_cast<unsigned long long>(blocks), segments.size(), secs);
      progress.Spin(buf);
    }
    status = done.get();
  } else {
    status = snap->Verify(&checked);
  }

  if (o.json) {
    ordered_json j = {{"store", (*store)->path()},
                      {"ok", status.ok()},
                      {"segments", segments.size()},
                      {"blocks", blocks},
                      {"blocks_checked", checked}};
    if (!status.ok()) j["error"] = ErrorJson(status);
    std::cout << j.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  } else if (status.ok()) {
    std::cout << "ok: " << segments.size() << " segments, " << checked
              << " blocks checked, no corruption\n";
  } else {
    std::cout << (status.code() == StatusCode::kCorruption ? "CORRUPT: " : "FAILED: ")
              << segments.size() << " segments, " << checked << " of " << blocks
              << " blocks checked before the error\n";
  }
  if (!status.ok()) return ReportError(kCmd, status);
  return kExitOk;
}

}  // namespace runstore::cli
