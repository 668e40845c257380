// progress.h: a one-line progress bar on stderr for long commands, e.g.
//
//   export  37% [###########...................] 1.2 GiB
//
// Drawn only when stderr is a terminal (and not disabled with --no-progress),
// redrawn at most ten times a second, and erased when done so that it never
// ends up in logs or pipes.
//
// Thread safety: one thread at a time.
#ifndef RUNSTORE_CLI_PROGRESS_H_
#define RUNSTORE_CLI_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace runstore::cli {

// Set by --no-progress; checked when a Progress is made.
extern bool g_progress_disabled;

// True when a progress display may be drawn on stderr.
bool ProgressAllowed();

class Progress {
 public:
  // `total` units of work (records, blocks); 0 when unknown (no percentage).
  Progress(std::string label, uint64_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` units finished so far; `bytes` shown after the bar (0: not shown).
  void Update(uint64_t done, uint64_t bytes);
  // Shows `text` after the label instead of a bar (for work without a count).
  void Spin(const std::string& text);
  // Erases the line. Called by the destructor if not before.
  void Finish();

  // The units of work in all, once known (0: unknown, no percentage).
  void SetTotal(uint64_t total) { total_ = total; }

  bool enabled() const { return enabled_; }

 private:
  // True when a line may be drawn now: at most ten a second, unless `force`.
  bool Due(bool force);
  void Draw(const std::string& line);

  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  unsigned spin_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace runstore::cli

#endif  // RUNSTORE_CLI_PROGRESS_H_
