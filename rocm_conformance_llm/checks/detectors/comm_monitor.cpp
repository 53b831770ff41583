#include "rocm_conformance_llm/checks/detectors/comm_monitor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace rcl {

CommMonitorOptions CommMonitorOptions::from(const TrainingConfig& cfg) {
  CommMonitorOptions options;
  options.check_interval = cfg.checksum_interval;
  options.log_step_time_spread = cfg.log_per_rank;
  return options;
}

CommMonitor::CommMonitor(const DiagnosticsConfig& diag, FindingLog& log, std::shared_ptr<GradientSync> sync,
                         std::vector<torch::Tensor> params, CommMonitorOptions options, LoopAccess* loop)
    : Detector(diag, log),
      sync_(std::move(sync)),
      checks_(sync_),
      params_(std::move(params)),
      options_(options),
      loop_(loop),
      stragglers_(sync_->world_size(), options.straggler) {}

void CommMonitor::report_all(std::vector<Finding> findings) {
  for (auto& f : findings) report(std::move(f));
}

void CommMonitor::preflight() {
  {
    GatheredParameters full(fsdp());  // FSDP: rank 0's whole model, then each rank keeps its shards of it
    sync_->broadcast_parameters(params_);
    full.keep_values();
  }
  report_all(checks_.run_canary());
  report_all(compare_parameters());
}

FsdpModel* CommMonitor::fsdp() const { return loop_ ? loop_->model()->fsdp() : nullptr; }

std::vector<Finding> CommMonitor::compare_parameters() {
  const GatheredParameters full(fsdp());
  return checks_.compare_parameters(params_);
}

void CommMonitor::on_step(const StepRecord& record) {
  // Every collective below is the checksum phase's: a hang or a lost rank here is named so.
  if (loop_) loop_->enter_phase(phase::checksum, record.step);
  const bool check = options_.check_interval > 0 && record.step % options_.check_interval == 0;
  if (check) {
    std::vector<Finding> desync = checks_.compare_collective_sequences();
    if (!desync.empty()) {
      const Finding fatal = desync.front();
      report_all(std::move(desync));
      throw CollectiveError(fatal);
    }
  }

  double in_collectives = 0.0;
  for (const auto& c : record.collectives) in_collectives += c.seconds;
  const RankStepTimes times = checks_.gather_step_times(record.step_time_s, in_collectives);
  if (!in_warmup(record)) {
    if (const auto verdict = stragglers_.add(times.busy_s)) {
      report(Finding{component::rccl,
                     "straggler_rank",
                     Severity::warn,
                     record.step,
                     sync_->rank(),
                     fmt::format("rank {} is a straggler: busy {:.4f} s per step vs {:.4f} s on the other ranks "
                                 "(medians), late in {} of the last {} steps; the others wait for it inside "
                                 "every collective",
                                 verdict->rank, verdict->busy_median_s, verdict->others_median_s, verdict->late_steps,
                                 verdict->window),
                     {{"straggler_rank", verdict->rank},
                      {"busy_median_s", verdict->busy_median_s},
                      {"others_median_s", verdict->others_median_s},
                      {"late_steps", verdict->late_steps},
                      {"window", verdict->window},
                      {"step_s", times.step_s},
                      {"busy_s", times.busy_s}}});
    }
  }

  if (check) {
    report_all(checks_.run_canary());
    report_all(compare_parameters());
    if (options_.log_step_time_spread && sync_->rank() == 0) {
      const StepTimeSpread step = spread(times.step_s);
      const StepTimeSpread busy = spread(times.busy_s);
      spdlog::info(
          "step {} across {} ranks: step time min/median/max {:.4f}/{:.4f}/{:.4f} s; busy (outside "
          "collectives) {:.4f}/{:.4f}/{:.4f} s, slowest rank {}",
          record.step, sync_->world_size(), step.min_s, step.median_s, step.max_s, busy.min_s, busy.median_s,
          busy.max_s, busy.slowest_rank);
    }
  }
}

}  // namespace rcl
