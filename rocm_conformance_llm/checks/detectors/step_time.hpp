// Step-time signatures. The post-warm-up window (steps warmup_steps+1 .. warmup_steps+
// window_steps) is the reference every later step is judged against.
//
// Attribution: an abrupt, persistent jump is a kernel-selection change (rocBLAS/hipBLASLt
// solution or TunableOp choice after autotuning); a gradual drift, jitter or a slow first step
// is kernel performance and MIOpen Find / kernel compilation (MIOpen).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "rocm_conformance_llm/checks/findings/detector.hpp"

namespace rcl {

// Signatures:
//   step_time_cliff (rocBLAS/hipBLASLt, warn; online): max(3, window_steps/2) consecutive steps
//     each >= slowdown_ratio_warn x the reference median, whose median is also >=
//     slowdown_ratio_warn x the window_steps steps just before them (abrupt, not a drift);
//     reported at the first slow step.
//   late_slowdown (MIOpen, warn; at finish): median of the last window_steps steps >=
//     slowdown_ratio_warn x the reference median, when no cliff explains it.
//   step_time_variance (MIOpen, warn; at finish): coefficient of variation of post-warm-up step
//     times >= step_time_cv_warn.
//   slow_first_step (MIOpen; at finish): first step / post-warm-up median >= first_step_ratio_warn
//     (warn), or >= a fifth of it (info: a noticeable but tolerable Find / compile cost).
//   host_contention (host, info; at finish): a cliff or late slowdown whose steps were mostly
//     host-contended, or a variance the uncontended steps do not show, is the host's: it is
//     reported here, with the contention as evidence, instead of against rocBLAS or MIOpen.
//
// A host-contended step: its training thread waited >= 20% of the step for a core (the
// scheduler's run queue; other processes on the run's cores), or, where the kernel keeps no
// run-queue wait, other processes used >= 25% of the machine (platform/host_load.hpp).
//
// Every step time is judged without the time in collectives (RCCL's, and on several ranks the
// slowest peer's: clean 2-rank runs on a loaded host had a step-time CV above 1 with them).
class StepTimeDetector final : public Detector {
 public:
  using Detector::Detector;
  void on_step(const StepRecord& r) override;
  void finish() override;

 private:
  int64_t cliff_run_length() const;

  std::optional<double> first_step_s_;
  int64_t first_step_ = 0;
  // What the host's contention explains: the ROCm finding it replaced and its figures.
  void explained_by_host(const std::string& signature, int64_t step, nlohmann::json figures);

  std::vector<double> steady_s_;  // post-warm-up step times, in order
  std::vector<int64_t> steady_steps_;
  std::vector<HostLoadSample> steady_host_;
  nlohmann::json explained_by_host_ = nlohmann::json::array();
  std::optional<double> reference_median_;
  int64_t slow_run_start_ = 0;  // first step of the current run of slow steps (0: none)
  int64_t slow_run_length_ = 0;
  int rank_ = 0;
  int64_t last_step_ = 0;
};

}  // namespace rcl
