// A running compaction's lease, and telling another compaction's leftovers
// from the files of one that still runs (docs/design.md#compaction,
// "Leftovers"). Nothing here compares clocks of two machines: a lease is
// stale when this process sees it unchanged for lease_expiry_s of its own
// (monotonic) time.
#include <chrono>

#include "store/compact/compact_internal.h"

namespace runstore::compact {

Result<std::unique_ptr<Lease>> Lease::Start(Env* env, const std::string& segments_dir,
                                            const std::string& token, double refresh_s) {
  std::unique_ptr<Lease> lease(new Lease(
      env,
      segments_dir + "/" + std::string(kCompactWriterPrefix) + token + std::string(kLeaseSuffix)));
  // Written before any temporary or claim that names the token, so that a
  // file with a token and no lease is a leftover.
  RUNSTORE_RETURN_IF_ERROR(lease->Write(0));
  if (refresh_s > 0)
    lease->thread_ = std::thread([l = lease.get(), refresh_s] { l->Loop(refresh_s); });
  return lease;
}

Lease::~Lease() { StopThread(); }

void Lease::StopThread() {
  if (thread_.joinable()) {
    {
      MutexLock lk(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    thread_.join();
  }
}

Status Lease::Write(uint64_t n) {
  RUNSTORE_ASSIGN_OR_RETURN(auto f, env_->NewWritableFile(path_, /*exclusive=*/n == 0));
  RUNSTORE_RETURN_IF_ERROR(f->Append(std::to_string(n) + "\n"));
  return f->Close();
}

void Lease::Loop(double refresh_s) {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(refresh_s));
  MutexLock lk(&mu_);
  for (uint64_t n = 1;; ++n) {
    const auto deadline = std::chrono::steady_clock::now() + period;
    while (!stop_ && cv_.WaitUntil(&mu_, deadline)) {
    }
    if (stop_) return;
    mu_.Unlock();
    Status s = Write(n);
    mu_.Lock();
    if (!s.ok() && error_.ok()) error_ = std::move(s);
  }
}

Status Lease::status() {
  MutexLock lk(&mu_);
  return error_;
}

Status Lease::Remove() {
  StopThread();
  Status s = env_->RemoveFile(path_);
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

std::string TokenOfName(std::string_view name) {
  if (!name.starts_with(kCompactWriterPrefix)) return "";
  name.remove_prefix(kCompactWriterPrefix.size());
  const size_t end = name.find_first_of("-.");
  if (end == 0 || end == std::string_view::npos) return "";
  return std::string(name.substr(0, end));
}

Result<std::set<std::string>> StaleTokens(Env* env, const std::string& segments_dir,
                                          const std::set<std::string>& tokens, double expiry_s) {
  std::set<std::string> stale;
  auto read = [&](const std::string& token) -> Result<std::string> {
    auto r = ReadFileToString(env, segments_dir + "/" + std::string(kCompactWriterPrefix) + token +
                                       std::string(kLeaseSuffix));
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) return std::string("\x01missing");
    return r;
  };
  std::map<std::string, std::string> before;
  for (const std::string& t : tokens) {
    RUNSTORE_ASSIGN_OR_RETURN(before[t], read(t));
  }
  if (expiry_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(expiry_s));
  for (const std::string& t : tokens) {
    RUNSTORE_ASSIGN_OR_RETURN(std::string after, read(t));
    if (after == before[t] || after == "\x01missing") stale.insert(t);
  }
  return stale;
}

}  // namespace runstore::compact
