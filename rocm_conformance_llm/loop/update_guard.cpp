#include "rocm_conformance_llm/loop/update_guard.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

namespace rcl {

UpdateGuard::UpdateGuard(const torch::Device& device)
    : state_{.withheld = torch::zeros({}, torch::TensorOptions().dtype(torch::kBool).device(device))} {}

torch::Tensor UpdateGuard::admit(const torch::Tensor& loss_sum, const torch::Tensor& grad_norm, int64_t step,
                                 bool replay) {
  // Decided on the device, read by the host one step later: an ordinary step never waits for
  // the GPU to say whether its loss was finite.
  state_.withheld.logical_or_(loss_sum.isfinite().logical_and(grad_norm.isfinite()).logical_not());
  if (!replay) state_.queued.push_back(step);
  if (state_.queued.size() > kQueuedUpdatesKept) state_.queued.pop_front();
  return state_.withheld.logical_not();
}

int64_t UpdateGuard::after_published(FlatAdamW& optimizer, int64_t published, bool skipped, double loss,
                                     double grad_norm, int64_t latest) {
  if (skipped || (std::isfinite(loss) && std::isfinite(grad_norm)) || published <= state_.released_through) return 0;
  const int64_t withheld =
      std::count_if(state_.queued.begin(), state_.queued.end(), [&](int64_t s) { return s >= published; });
  optimizer.forget_steps(withheld);
  state_.withheld.fill_(false);
  state_.released_through = latest;
  spdlog::warn(
      "step {}: non-finite loss or gradients: the updates of steps {}..{} were withheld on the device; "
      "training goes on from the weights before step {}",
      published, published, latest, published);
  return withheld;
}

UpdateGuard::State UpdateGuard::state() const {
  State copy = state_;
  copy.withheld = state_.withheld.clone();
  return copy;
}

void UpdateGuard::load_state(const State& state) {
  state_.withheld.copy_(state.withheld);
  state_.released_through = state.released_through;
  state_.queued = state.queued;
}

}  // namespace rcl
