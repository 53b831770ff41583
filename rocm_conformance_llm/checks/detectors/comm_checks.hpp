// The arithmetic behind the cross-rank RCCL checks, apart from any transport so every verdict
// can be tested on synthetic numbers: the exact all-reduce canary, a bitwise parameter
// fingerprint, the odd rank out of a set of values, and straggler tracking over a window.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include <torch/torch.h>

namespace rcl {

// --- all-reduce canary -------------------------------------------------------------------
// Rank r contributes (r + 1) * (1 + i % 7) at element i: small integers, exact in float32,
// so the all-reduced sum (1 + i % 7) * n(n+1)/2 is known exactly on every rank (up to
// ~1500 ranks). Any other value is a wrong reduction, not rounding.
torch::Tensor canary_contribution(int rank, int64_t numel, const torch::TensorOptions& options);
torch::Tensor canary_expected_sum(int world_size, int64_t numel, const torch::TensorOptions& options);

struct CanaryMismatch {
  int64_t wrong_elements = 0;
  int64_t first_index = -1;
  double got = 0.0;
  double expected = 0.0;
};
// nullopt when `reduced` equals the exact sum everywhere.
std::optional<CanaryMismatch> compare_canary(const torch::Tensor& reduced, int world_size);

// --- parameter fingerprint ---------------------------------------------------------------
// Data-parallel ranks must hold bitwise identical parameters. `hash` covers every bit of every
// element, weighted by position, in integer arithmetic that cannot overflow, so it does not
// depend on reduction order or thread count; `sum` (float64) says how far apart ranks are.
struct ParameterFingerprint {
  uint64_t hash = 0;
  double sum = 0.0;
};
ParameterFingerprint fingerprint_parameters(const std::vector<torch::Tensor>& params);

// --- odd rank out ------------------------------------------------------------------------
// Ranks whose value differs from the reference value: the one most ranks hold, ties broken by
// the lowest rank's (so with two ranks, rank 1 is the one named).
std::vector<int> ranks_differing_from_majority(const std::vector<int64_t>& values);

// --- straggler ---------------------------------------------------------------------------
// Synchronous data parallelism hides a slow rank in everyone's step time (the others wait for
// it inside the all-reduce), so ranks are compared on busy time: step time minus the time spent
// in collectives. A rank is late in a step when its busy time exceeds `ratio` x the median
// rank's and the median by at least `min_gap_s`; it is a straggler when late in at least 80%
// of the last `window` steps.
struct StragglerOptions {
  int window = 10;
  double ratio = 1.5;
  double min_gap_s = 0.002;  // microsecond-scale toy steps must not name a straggler on jitter
};

struct StepTimeSpread {
  double min_s = 0.0;
  double median_s = 0.0;
  double max_s = 0.0;
  int slowest_rank = 0;
};
StepTimeSpread spread(const std::vector<double>& per_rank_seconds);

struct StragglerVerdict {
  int rank = 0;
  int late_steps = 0;  // of the window
  int window = 0;
  double busy_median_s = 0.0;  // the straggler's median busy time over the window
  double others_median_s = 0.0;
};

class StragglerTracker {
 public:
  StragglerTracker(int world_size, StragglerOptions options);
  // One step's busy seconds per rank. Returns a verdict when a rank becomes a straggler (not
  // again while it stays one; again if it recovers and relapses).
  std::optional<StragglerVerdict> add(const std::vector<double>& busy_s);

 private:
  int world_size_;
  StragglerOptions options_;
  std::deque<std::vector<double>> window_;  // busy seconds per rank, oldest first
  std::optional<int> current_;
};

}  // namespace rcl
