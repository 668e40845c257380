#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common.h"

namespace runstore::cli {

bool g_progress_disabled = false;

bool ProgressAllowed() { return !g_progress_disabled && isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), enabled_(ProgressAllowed()) {}

Progress::~Progress() { Finish(); }

bool Progress::Due(bool force) {
  if (!enabled_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_ < std::chrono::milliseconds(100)) return false;
  last_ = now;
  return true;
}

void Progress::Draw(const std::string& line) {
  // \r to the start, the line, then clear whatever a longer line left behind.
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::Update(uint64_t done, uint64_t bytes) {
  // The end is always drawn, so that the last line seen says it.
  if (!Due(total_ > 0 && done >= total_)) return;
  constexpr int kWidth = 30;
  char pct[16] = "";
  std::string bar;
  if (total_ > 0) {
    const double f = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    std::snprintf(pct, sizeof(pct), "%3d%%", static_cast<int>(f * 100));
    const int filled = static_cast<int>(f * kWidth);
    bar = " [" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]";
  }
  std::string line = label_ + "  " + pct + bar;
  if (bytes > 0) line += " " + HumanBytes(bytes);
  Draw(line);
}

void Progress::Spin(const std::string& text) {
  if (!Due(false)) return;
  static constexpr char kSpinner[] = "|/-\\";
  Draw(label_ + "  " + kSpinner[spin_++ % 4] + " " + text);
}

void Progress::Finish() {
  if (enabled_ && drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  drawn_ = false;
  enabled_ = false;
}

}  // namespace runstore::cli
