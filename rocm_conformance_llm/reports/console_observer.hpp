// The console during a run: on a terminal (rank 0) one updating status line; elsewhere a plain
// line per step, so CI logs hold no control characters. Every summary_interval_s a soak summary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"
#include "rocm_conformance_llm/reports/progress.hpp"

namespace rcl {

class ConsoleObserver final : public StepObserver {
 public:
  // `status`: the terminal's status line; null for plain lines.
  ConsoleObserver(std::vector<std::string> modes, const TrainingConfig& cfg, double summary_interval_s,
                  const FindingLog& findings, std::shared_ptr<StatusLineSink> status);
  void on_step(const StepRecord& r) override;

 private:
  Progress progress_at(const StepRecord& r) const;
  void summarize(const StepRecord& r);

  std::vector<std::string> modes_;
  const int64_t total_steps_;
  const double max_duration_s_;
  const double summary_interval_s_;
  const FindingLog& findings_;
  std::shared_ptr<StatusLineSink> status_;  // null: plain lines
  const SteadyClock::time_point started_ = SteadyClock::now();
  double busy_s_ = 0;
  SteadyClock::time_point last_summary_ = started_;
  int64_t window_tokens_ = 0;
  double window_busy_s_ = 0;
  int64_t first_memory_ = -1, last_memory_ = -1;
};

}  // namespace rcl
