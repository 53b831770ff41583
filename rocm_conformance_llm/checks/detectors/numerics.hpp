// rocBLAS/hipBLASLt numerics: non-finite losses and gradients, loss spikes that do or do not
// recover, and the active probes that find where a non-finite value first appears and whether
// it is a reduced-precision effect or a fault.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/checks/findings/detector.hpp"

namespace rcl {

class LoopAccess;

// Signatures (component rocBLAS/hipBLASLt):
//   nonfinite_loss (fail), nonfinite_grad_norm (fail, not for fp16 steps the loss scaler
//   skipped), persistent_overflow_skips (warn: the fp16 scaler skipped `window_steps` steps in a
//   row), loss_spike (warn: the loss is a z-score of at least loss_spike_zscore (raised over
//   long runs: run_threshold) above the median of the last `window_steps` accepted post-warm-up
//   losses AND at least loss_spike_min_jump x that median above it, or 1.5x the largest
//   relative jump a healthy step of this run made, whichever is more; the scale is the run's
//   own noise: the larger of the window's scaled MAD and the step-to-step noise of the last
//   kNoiseWindows windows, which carries what dropout, drop-path and small batches add),
//   loss_divergence (fail: still a spike after `window_steps` steps; reported at the spike's
//   step), grad_norm_spike (warn, up to 5: a finite gradient norm at least that z-score robust
//   deviations above the recent median in log10 space, the scale floored at 0.25 decades, so
//   >= ~30x: a flipped exponent bit or a corrupted reduction).
// The accepted post-warm-up losses loss_spike needs before it judges a step: the steps up to
// warmup_steps + this many are the ones it cannot judge (LossSanityDetector covers them).
inline int64_t loss_baseline_samples(const DiagnosticsConfig& cfg) {
  return std::max<int64_t>(3, cfg.window_steps / 2);
}

class NumericsDetector final : public Detector {
 public:
  using Detector::Detector;
  void on_step(const StepRecord& r) override;

 private:
  struct LossReference {
    double median = 0.0;
    double scale = 0.0;     // robust standard deviation of healthy losses
    double min_jump = 0.0;  // relative to the median
  };
  struct PendingSpike {
    int64_t step = 0;
    double loss = 0.0;
    LossReference reference;  // frozen at the spike: recovery is judged against it
    int64_t steps_after = 0;
  };
  void check_spike(const StepRecord& r);
  void check_grad_norm(const StepRecord& r);
  LossReference loss_reference() const;
  bool is_spike(double loss, const LossReference& ref) const;

  std::deque<double> baseline_;  // the last window_steps accepted losses: the level
  std::deque<double> recent_;    // the last kNoiseWindows windows of them: the noise
  double largest_jump_ = 0.0;    // of an accepted loss over its window's median: the noise's tail
  std::deque<double> log_grad_norms_;
  std::optional<PendingSpike> pending_;
  int64_t consecutive_skips_ = 0;
};

struct NamedTensor {
  std::string name;
  torch::Tensor value;
};

// Index of the first tensor (in execution order) holding a NaN or Inf.
std::optional<size_t> first_nonfinite(const std::vector<NamedTensor>& outputs);

// Re-runs one micro-batch (no optimizer step) and returns its named per-block outputs in
// execution order (the loss last, gradients after it if the callee runs backward). `fp32`
// true: autocast off and fp32 weights; false: the training precision.
using MicroBatchRun = std::function<std::vector<NamedTensor>(bool fp32)>;

struct NonFiniteDiagnosis {
  // "numerics": non-finite only in the reduced precision (overflow / range);
  // "fault": non-finite in fp32 too; "not_reproduced": the re-run is finite (transient).
  std::string classification;
  std::optional<std::string> first_nonfinite_training;  // block name under training precision
  std::optional<std::string> first_nonfinite_fp32;      // only run for fp16/bf16 training
};

// `reduced_precision`: training runs fp16 or bf16 (otherwise the fp32 re-run is the same run).
NonFiniteDiagnosis diagnose_nonfinite(const MicroBatchRun& run, bool reduced_precision);

// nonfinite_reduced_precision_only (warn), nonfinite_also_fp32 (fail),
// nonfinite_not_reproducible (warn), all rocBLAS/hipBLASLt with the first bad block as evidence.
Finding to_finding(const NonFiniteDiagnosis& d, const std::string& precision, int64_t step, int rank);

// Loop-side, once per run: at the first non-finite loss, before the optimizer step spreads it
// into every weight (after which no re-run can say where it came from), re-runs the step's
// micro-batches without gradients, with the same dropout masks, and names the first non-finite
// block output in the training precision and in fp32 (diagnose_nonfinite). This is the one host
// read per step the loop makes while checks are on (none once diagnosed). unsloth#3385 (NaN
// from the first block's forward), rocm-libraries#9055 (bf16 GEMM returns NaN).
class NonFiniteLocaliser final : public Detector {
 public:
  NonFiniteLocaliser(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop);
  // Notes where the step's data starts; nothing is read from the device here.
  void on_gradients(int64_t step, const std::vector<torch::Tensor>& params, const torch::Tensor& loss_sum,
                    int64_t first_micro_batch) override;
  // This rank's loss, read one step late: when non-finite, re-runs that step's micro-batches.
  // The trainer withheld the updates since, so the weights are the ones the step saw.
  void on_loss(int64_t step, double local_loss) override;

 private:
  LoopAccess& loop_;
  bool diagnosed_ = false;
  std::map<int64_t, int64_t> first_micro_batch_;  // recent steps only
};

}  // namespace rcl
