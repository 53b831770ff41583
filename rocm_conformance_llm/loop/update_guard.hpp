// The non-finite update guard. A step whose loss or gradient norm is non-finite must not touch
// the weights, yet the host learns the loss one step late (no device-wide sync in the hot path).
// So the decision is made on the device: a flag set by a non-finite step withholds that update
// and every one queued after it, until the host has read the step (and the observers have
// localised the fault from the untouched weights); then the flag is cleared and the withheld
// steps are taken back from the optimizer's step count (its bias correction counts updates).
#pragma once

#include <cstdint>
#include <deque>

#include <torch/torch.h>

#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

class UpdateGuard {
 public:
  // Recent steps whose update was queued. A step is read by the host one step late, so a
  // release takes back at most the non-finite step and the one queued after it; eight leaves
  // margin and keeps a long run's bookkeeping bounded.
  static constexpr size_t kQueuedUpdatesKept = 8;

  // Everything the guard knows: a snapshot holds it, so a rewind puts it back.
  struct State {
    torch::Tensor withheld;        // device bool: withhold updates until released
    int64_t released_through = 0;  // steps up to here are already accounted for
    std::deque<int64_t> queued{};  // recent steps whose optimizer update was queued
  };

  explicit UpdateGuard(const torch::Device& device);

  // Whether the optimizer update of `step` may apply (FlatAdamW::step's device bool): only while
  // no non-finite step is pending, this one included. Not asked for a step the fp16 scaler
  // skipped (it left the weights alone already; its overflow must not withhold the next step's
  // update too). A `replay` (a check's unpublished step) is never published, so it is not queued
  // for a release.
  torch::Tensor admit(const torch::Tensor& loss_sum, const torch::Tensor& grad_norm, int64_t step, bool replay);

  // Step `published` reached the host as {loss, grad_norm}; `latest` is the last step queued.
  // A non-finite step not yet accounted for releases the updates withheld since it: the flag
  // is cleared and those steps are forgotten by the optimizer. Returns how many were forgotten.
  int64_t after_published(FlatAdamW& optimizer, int64_t published, bool skipped, double loss, double grad_norm,
                          int64_t latest);

  State state() const;  // a copy (the flag cloned)
  void load_state(const State& state);

 private:
  State state_;
};

}  // namespace rcl
