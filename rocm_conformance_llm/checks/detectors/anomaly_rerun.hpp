// Transient or persistent: when a numeric anomaly fires, the step is run again from the state
// before it and the finding is classified (after Megatron-LM's rerun state machine, which
// re-runs an iteration in place and calls it CORRECT, TRANSIENT or PERSISTENT). The rules are
// in docs/detectors.md ("Re-running an anomaly"); the classification is rerun_outcome.hpp's.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

// Whether a re-run's {loss, gradient norm} show the anomaly `f` reported; nullopt when `f` is not
// a re-runnable anomaly (or its evidence lacks what the judgement needs). Non-finite: non-finite
// again. Spike: the re-run value lies nearer the spiked value than the recent median (in log10
// for gradient norms).
std::optional<bool> shows_anomaly(const Finding& f, double loss, double grad_norm);

// Loop-side: keeps the state before each of the last two steps (a step is published one step
// late), notes the anomalies the step detectors report, and between steps rewinds to the
// anomalous step, re-runs it (training precision, then float32), classifies every finding of
// that step, and puts the run back where it was. Off for models too large to snapshot every
// step (see kRerunMaxParameters in anomaly_rerun.cpp).
class AnomalyRerun final : public Detector {
 public:
  AnomalyRerun(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop);
  void on_step(const StepRecord& r) override;
  void between_steps(int64_t step) override;
  static bool applies(const TrainingConfig& cfg);

 private:
  struct Anomaly {
    size_t index;  // in the FindingLog
    Finding finding;
  };
  // Re-runs the pending anomalies' step from `before`, classifies them, restores the run.
  void rerun(const LoopAccess::Snapshot& before);

  LoopAccess& loop_;
  std::deque<LoopAccess::Snapshot> before_;  // state before each of the last two steps
  std::vector<Anomaly> pending_;             // of one step, noted when it was published
  size_t findings_seen_ = 0;
  TransientHistory transients_;
};

}  // namespace rcl
