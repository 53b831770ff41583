// Transient or persistent: when a numeric anomaly fires, the step is run again from the state
// before it and the finding is classified (after Megatron-LM's rerun state machine, which
// re-runs an iteration in place and calls it CORRECT, TRANSIENT or PERSISTENT). The rules are
// in docs/detectors.md ("Re-running an anomaly").
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rocm_conformance_llm/checks/detector.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

// What the re-runs of one anomalous step saw. Unset: that re-run was not made.
struct RerunOutcome {
  bool reproducible = false;         // again when re-run on the same device, same precision
  std::optional<bool> also_in_fp32 = std::nullopt;  // again with autocast off (float32 compute)
  std::optional<bool> also_on_cpu = std::nullopt;   // again on the CPU (never on a CPU run: the device is the CPU)
};

// transient: not reproduced; precision: reproduced, gone in float32; configuration: also on
// the CPU (two BLAS implementations agree, so the job computes it); persistent: otherwise.
Classification classify(const RerunOutcome& outcome);

// Writes the outcome and its classification into `f`.
void record_outcome(Finding& f, const RerunOutcome& outcome);
// record_outcome, and says so in the message. A classification other than persistent
// caps the severity at warn: the step computed differently when run again, or the device
// computes what the job asks for; the finding stays in the report with its action.
void apply_rerun(Finding& f, const RerunOutcome& outcome);

// One rank's transients per signature. The first is a one-off (apply_rerun: warn, action
// rerun); another of the same signature in the same run is an intermittent fault, not a one-off:
// it keeps the detector's severity and points at the node (action isolate_node), as the README's
// action table says a repeated `rerun` means.
class TransientHistory {
 public:
  // apply_rerun, then that escalation.
  void apply(Finding& f, const RerunOutcome& outcome);

 private:
  std::map<std::string, int> seen_;
};

// Whether a re-run's {loss, gradient norm} show the anomaly `f` reported; nullopt when `f` is not
// a re-runnable anomaly (or its evidence lacks what the judgement needs). Non-finite: non-finite
// again. Spike: the re-run value lies nearer the spiked value than the recent median (in log10
// for gradient norms).
std::optional<bool> shows_anomaly(const Finding& f, double loss, double grad_norm);

// Loop-side: keeps the state before each of the last two steps (a step is published one step
// late), notes the anomalies the step detectors report, and between steps rewinds to the
// anomalous step, re-runs it (training precision, then float32), classifies every finding of
// that step, and puts the run back where it was. Off for models too large to snapshot every
// step (see kRerunMaxParameters in rerun.cpp).
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
  std::vector<Anomaly> pending_;           // of one step, noted when it was published
  size_t findings_seen_ = 0;
  TransientHistory transients_;
};

}  // namespace rcl
