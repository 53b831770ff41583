// Every collective kind, verified, timed and named (RCCL): the exact battery of
// transport/collective_battery.hpp run on every rank before step 1 and every
// training.collective_check_interval steps, with a latency history per (kind, op, dtype, size).
//   collective_result_mismatch (fail): a case's output was not the exact expected one; names the
//     ranks that saw it and, where the kind tells (all-gather, all-to-all), whose data came back wrong
//   collective_slow (warn): a case took >= diagnostics.collective_slow_ratio x its own median over
//     the earlier batteries and at least collective_slow_min_extra_s more (0.2 s on CPU ranks,
//     whose Gloo collectives wait for peers the shared host descheduled); times are the slowest
//     rank's, so every rank reports the same
// A case that hangs is a collective_timeout naming its kind, the group and the missing rank
// (transport/communicator.hpp). The table goes to report.json's `collectives` section.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"
#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

struct CollectiveCheckOptions {
  int64_t interval = 0;         // steps between batteries (0 = off)
  int64_t max_bytes = 1 << 20;  // largest message (battery_sizes)
  uint64_t seed = 0;            // battery seeds: seed + step
  double slow_ratio = 4.0;
  double slow_min_extra_s = 0.01;
  double collective_timeout_s = 120.0;  // the collective-hang fault stalls 2.5x this

  static CollectiveCheckOptions from(const TrainingConfig& cfg, const DiagnosticsConfig& diag, bool shared_cores);
};

class CollectiveCheck final : public Detector {
 public:
  // Over `sync`'s world of several ranks. `faults` (may be null): collective-corrupt,
  // collective-hang and slow-all-to-all strike in the battery.
  CollectiveCheck(const DiagnosticsConfig& diag, FindingLog& log, std::shared_ptr<const GradientSync> sync,
                  CollectiveCheckOptions options, const FaultPlan* faults = nullptr, LoopAccess* loop = nullptr);

  void preflight() override;
  void on_step(const StepRecord& record) override;
  // {"collectives": {backend, world_size, batteries, cases: [{kind, reduce_op, dtype, bytes, route,
  // runs, verified, latency_s, latency_history_s, bus_bandwidth_gbps, last_bus_bandwidth_gbps}]}}
  nlohmann::json report_sections() const override;

 private:
  void run_battery_at(int64_t step);

  struct CaseHistory {
    std::deque<double> seconds;  // the last kHistory healthy times (slow ones stay out)
    double last_seconds = 0.0;
    int64_t runs = 0, wrong_runs = 0;
    std::string route;
  };

  CrossRankChecks checks_;
  CollectiveCheckOptions options_;
  const FaultPlan* faults_;
  LoopAccess* loop_;
  std::vector<BatteryCase> cases_;
  std::vector<CaseHistory> history_;  // by case index
  int64_t batteries_ = 0;
};

}  // namespace rcl
