// Fault injection: FaultInjector strikes the faults of a FaultPlan (faults/fault_plan.hpp: the specs,
// their syntax and meaning) at the points of the training step where the real failures strike.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/model.hpp"

namespace rcl {

// Strikes the requested faults at their steps, at the points of the loop where the real
// failures strike. Added to the trainer's hooks before the checks, so the checks see them.
class FaultInjector final : public StepHooks {
 public:
  FaultInjector(const FaultPlan& plan, int rank, GPT model, torch::Device device);

  void on_phase(const char* phase, int64_t step,
                const std::vector<CollectiveSample>& collectives) override;  // rank-stop
  void before_forward(int64_t step, bool first) override;                    // hang, nan
  torch::Tensor on_logits(torch::Tensor logits, int64_t step) override;      // loss-spike, logits-nan[-once]
  void on_gradients(int64_t step, const std::vector<torch::Tensor>& params, const torch::Tensor& loss_sum,
                    int64_t first_micro_batch) override;              // grad-bitflip
  void before_step_time(StepRecord& rec, double elapsed_s) override;  // slow-step, slow-collective, memory-leak

 private:
  const FaultSpec* active(FaultKind kind, int64_t step) const;

  const FaultPlan& plan_;
  int rank_;
  GPT model_;
  torch::Device device_;
  torch::Tensor nan_saved_;              // nan: the weight value to put back after the forward
  bool logits_nan_once_struck_ = false;  // logits-nan-once: a re-run of its step is clean
  std::vector<torch::Tensor> leaked_;    // memory-leak: kept alive for the whole run
};

}  // namespace rcl
