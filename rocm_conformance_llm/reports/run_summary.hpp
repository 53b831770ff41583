// Per-step facts the report and the baseline comparison need, kept by an observer: loss
// trajectory, step times, throughput, peak memory, op fingerprints, and the last memory sample
// (evidence for an out-of-memory crash).
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/op_counter.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

struct StepPoint {
  int64_t step = 0;
  double loss = 0.0;
  double step_time_s = 0.0;
  double collective_s = 0.0;  // inside the step's collectives: step_time_s less it is the rank's own work
  int64_t tokens = 0;
  int64_t peak_memory_bytes = -1;  // see peak_memory_figure()
  std::string memory_figure;
  OpCounts op_counts;
};

// The best "how much memory did this step need" figure a sample offers: peak allocated, else
// allocated, else RSS. nullopt when none is known.
std::optional<std::pair<int64_t, std::string>> peak_memory_figure(const MemorySample& m);
StepPoint make_step_point(const StepRecord& r);

// {"steps", "first_step", "last_step", "loss": {first, last, min}, "step_time_s": {median, p95,
//  cv, max} over post-warm-up steps (all steps if there are none), "tokens_per_s": {overall,
//  median}, "peak_memory": {bytes, figure}}
nlohmann::json summarize_steps(const std::vector<StepPoint>& steps, int64_t warmup_steps);

// Thread-safe: the watchdog thread reads it while the training thread may still append.
class RunSummary final : public StepObserver {
 public:
  void on_step(const StepRecord& r) override;
  std::vector<StepPoint> steps() const;
  int64_t last_step() const;  // 0 before the first step
  std::optional<MemorySample> last_memory() const;

 private:
  mutable std::mutex mutex_;
  std::vector<StepPoint> steps_;
  std::optional<MemorySample> last_memory_;
};

}  // namespace rcl
