// Terminal progress: on a TTY one status line updated in place (\r), log lines printed above
// it; elsewhere (CI logs, files) the plain per-step lines and no control character.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <spdlog/sinks/sink.h>

namespace rcl {

// stderr is a terminal that takes \r and ESC[K (not TERM=dumb).
bool stderr_is_terminal();

struct Progress {
  int64_t step = 0;
  int64_t total_steps = 0;
  double elapsed_s = 0;
  double max_duration_s = 0;  // 0: the run is bounded by steps only
  double tokens_per_s = 0;
  double mean_step_time_s = 0;
  int info = 0, warn = 0, fail = 0;  // findings so far
};
// "step 37/60 (62%) | 1234 tok/s | ETA 0:12 | findings: 0 fail, 1 warn, 0 info"; with a time
// limit the ETA is the sooner of the two ends.
std::string format_progress(const Progress& p);

// Wraps the logger's console sink: a log line first wipes the status line, so it never lands
// in the middle of one; the next show() draws it again below.
class StatusLineSink final : public spdlog::sinks::sink {
 public:
  explicit StatusLineSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override;
  void flush() override;
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }
  void show(const std::string& text);

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
  std::mutex mutex_;
  bool shown_ = false;
};

// Puts a StatusLineSink in front of the default logger's sinks; call once, before any thread
// other than the caller logs.
std::shared_ptr<StatusLineSink> install_status_line();

}  // namespace rcl
