// ROCr / caching-allocator signatures: memory that grows every step, reserved memory the run
// never uses (fragmentation), and memory a checkpoint reload fails to give back.
#pragma once

#include <deque>
#include <optional>
#include <string>

#include "rocm_conformance_llm/checks/findings/detector.hpp"

namespace rcl {

// The figure leak checks follow: allocator-allocated bytes when the source reports them, else
// the process RSS (CPU runs, or a libtorch without device statistics).
struct TrackedMemory {
  int64_t bytes = -1;
  std::string figure;  // "allocated_bytes" | "rss_bytes"
};
std::optional<TrackedMemory> tracked_memory(const MemorySample& m);

// Signatures (component ROCr allocator):
//   memory_growth (warn): the Theil-Sen slope of the tracked figure is >=
//     memory_slope_bytes_per_step_warn in BOTH of the last two non-overlapping windows of
//     window_steps post-warm-up steps, AND the newer window's floor (its smallest value: memory
//     no step gave back) is above the older one's by that slope times the window. Requiring two
//     windows separates a steady leak from a one-off level shift (first evaluation, cache
//     growth), which only lifts one of them; the floors separate it from a periodic sawtooth (a
//     GPU run's allocated bytes rose over 5 steps and fell back, every 5 steps, on an H200: each
//     window's slope was positive, its floor the same). Reported at the step the second window
//     completes.
//   allocator_fragmentation (warn): (reserved - peak allocated) / reserved >=
//     fragmentation_ratio_warn after warm-up, only when reserved is known and >= 64 MiB. Peak,
//     not end-of-step allocated: freed activations sitting in the cache are normal caching, but
//     reserved memory never used even at the peak is fragmentation / stranded blocks.
class MemoryDetector final : public Detector {
 public:
  using Detector::Detector;
  void on_step(const StepRecord& r) override;

 private:
  void check_growth(const StepRecord& r, const TrackedMemory& m);
  void check_fragmentation(const StepRecord& r);

  std::string figure_;
  std::deque<double> steps_;
  std::deque<double> bytes_;
};

// After a checkpoint reload the tracked figure should return to where it was before the save
// (same source). memory_not_recovered_after_reload (ROCr allocator, warn) when it stays higher
// by more than cfg.reload_memory_growth_warn_bytes; nullopt when fine or not comparable.
std::optional<Finding> check_memory_after_reload(const MemorySample& before, const MemorySample& after,
                                                 const DiagnosticsConfig& cfg, int64_t step, int rank);

// The sample as report evidence (same keys as metrics.jsonl).
nlohmann::json memory_to_json(const MemorySample& m);

// --memory-profile: where a run's memory goes, for report.json's "memory_profile": the setup
// samples (after model creation, after the move to the device), after step 1, and the step
// with the highest figure (peak_allocated_bytes where the source has it, else the tracked one).
class MemoryProfile final : public StepObserver {
 public:
  explicit MemoryProfile(std::vector<std::pair<std::string, MemorySample>> setup) : setup_(std::move(setup)) {}
  void on_step(const StepRecord& r) override;
  nlohmann::json to_json() const;

 private:
  std::vector<std::pair<std::string, MemorySample>> setup_;
  std::optional<MemorySample> first_step_;
  std::optional<MemorySample> peak_;
  int64_t peak_step_ = 0, peak_bytes_ = -1;
  std::string peak_figure_;
};

}  // namespace rcl
