#include "rocm_conformance_llm/reports/console_observer.hpp"

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/reports/metrics_writer.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {

ConsoleObserver::ConsoleObserver(std::vector<std::string> modes, const TrainingConfig& cfg, double summary_interval_s,
                                 const FindingLog& findings, std::shared_ptr<StatusLineSink> status)
    : modes_(std::move(modes)),
      total_steps_(cfg.steps),
      max_duration_s_(cfg.max_duration_s),
      summary_interval_s_(summary_interval_s),
      findings_(findings),
      status_(std::move(status)) {}

void ConsoleObserver::on_step(const StepRecord& r) {
  busy_s_ += r.step_time_s;
  if (status_) status_->show(format_progress(progress_at(r)));
  else spdlog::info("{}", format_step_line(r, modes_));
  summarize(r);
}

Progress ConsoleObserver::progress_at(const StepRecord& r) const {
  Progress p{.step = r.step,
             .total_steps = total_steps_,
             .elapsed_s = seconds_since(started_),
             .max_duration_s = max_duration_s_,
             .tokens_per_s = r.tokens_per_s,
             .mean_step_time_s = busy_s_ / static_cast<double>(r.step)};
  for (const auto& f : findings_.snapshot())
    ++(f.severity == Severity::fail ? p.fail : f.severity == Severity::warn ? p.warn : p.info);
  return p;
}

// A soak's log is read hours later: every summary_interval_s one line with the throughput
// over the interval (not one step's), the findings so far, the memory trend and the ETA.
void ConsoleObserver::summarize(const StepRecord& r) {
  window_tokens_ += r.tokens;
  window_busy_s_ += r.step_time_s;
  const int64_t memory = r.memory.allocated_bytes >= 0 ? r.memory.allocated_bytes : r.memory.rss_bytes;
  if (first_memory_ < 0) first_memory_ = last_memory_ = memory;
  const double since = seconds_since(last_summary_);
  if (summary_interval_s_ <= 0 || since < summary_interval_s_) return;
  Progress p = progress_at(r);
  p.tokens_per_s = window_busy_s_ > 0 ? static_cast<double>(window_tokens_) / window_busy_s_ : 0.0;
  spdlog::info("{}", format_soak_summary(format_progress(p), memory, last_memory_, first_memory_, since));
  window_tokens_ = 0;
  window_busy_s_ = 0;
  last_memory_ = memory;
  last_summary_ = SteadyClock::now();
}

}  // namespace rcl
