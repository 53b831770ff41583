#include "rocm_conformance_llm/reports/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rcl {

namespace {
constexpr const char* kWipeLine = "\r\033[K";

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}
}  // namespace

bool stderr_is_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
}

std::string format_progress(const Progress& p) {
  double eta = static_cast<double>(p.total_steps - p.step) * p.mean_step_time_s;
  std::string where =
      fmt::format("step {}/{} ({}%)", p.step, p.total_steps, p.total_steps > 0 ? 100 * p.step / p.total_steps : 0);
  if (p.max_duration_s > 0) {
    where += fmt::format(" | {} of {}", clock_text(p.elapsed_s), clock_text(p.max_duration_s));
    eta = std::min(eta, p.max_duration_s - p.elapsed_s);
  }
  return fmt::format("{} | {:.0f} tok/s | ETA {} | findings: {} fail, {} warn, {} info", where, p.tokens_per_s,
                     clock_text(eta), p.fail, p.warn, p.info);
}

void StatusLineSink::log(const spdlog::details::log_msg& msg) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shown_) std::fputs(kWipeLine, stderr);
  shown_ = false;
  inner_->log(msg);
}

void StatusLineSink::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  inner_->flush();
}

void StatusLineSink::show(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fputs((kWipeLine + text).c_str(), stderr);
  std::fflush(stderr);
  shown_ = true;
}

std::shared_ptr<StatusLineSink> install_status_line() {
  auto& sinks = spdlog::default_logger()->sinks();
  if (auto installed = std::dynamic_pointer_cast<StatusLineSink>(sinks.front())) return installed;
  auto status = std::make_shared<StatusLineSink>(sinks.front());
  sinks.front() = status;
  return status;
}

}  // namespace rcl
