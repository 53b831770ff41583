#include "rocm_conformance_llm/optimizer.hpp"

#include <cmath>
#include <set>
#include <stdexcept>

namespace rcl {

FlatAdamW::FlatAdamW(const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& not_decayed,
                     AdamWHyper hyper)
    : hyper_(hyper) {
  std::vector<torch::Tensor> all(decayed);
  all.insert(all.end(), not_decayed.begin(), not_decayed.end());
  if (all.empty()) throw std::invalid_argument("FlatAdamW: no parameters");
  std::set<const void*> seen;
  int64_t total = 0;
  for (const auto& p : all) {
    if (!seen.insert(p.unsafeGetTensorImpl()).second)
      throw std::invalid_argument("FlatAdamW: a parameter is listed twice");
    if (p.scalar_type() != all[0].scalar_type() || p.device() != all[0].device())
      throw std::invalid_argument("FlatAdamW: parameters differ in dtype or device");
    total += p.numel();
  }
  for (const auto& p : decayed) decayed_numel_ += p.numel();

  torch::NoGradGuard no_grad;
  params_ = torch::empty({total}, all[0].options());
  grads_ = torch::zeros({total}, all[0].options());
  int64_t offset = 0;
  for (auto p : all) {
    auto values = params_.narrow(0, offset, p.numel());
    values.copy_(p.detach().reshape({-1}));
    p.set_data(values.view(p.sizes()));
    p.mutable_grad() = grads_.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  state_.exp_avg = torch::zeros_like(params_);
  state_.exp_avg_sq = torch::zeros_like(params_);
}

void FlatAdamW::zero_grad() { grads_.zero_(); }

torch::Tensor FlatAdamW::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  const auto total = grads_.norm();
  if (max_norm > 0) {
    // The same arithmetic as torch::nn::utils::clip_grad_norm_, on the device.
    grads_.mul_((max_norm / (total + 1e-6)).clamp_max(1.0));
  }
  return total;
}

void FlatAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  const int64_t step = ++state_.steps;
  // torch::optim::AdamW::step's sequence of ops, on the whole buffer at once.
  if (decayed_numel_ > 0) params_.narrow(0, 0, decayed_numel_).mul_(1.0 - lr * hyper_.weight_decay);
  state_.exp_avg.mul_(hyper_.beta1).add_(grads_, 1.0 - hyper_.beta1);
  state_.exp_avg_sq.mul_(hyper_.beta2).addcmul_(grads_, grads_, 1.0 - hyper_.beta2);
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, double(step));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, double(step));
  const auto denom = (state_.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(hyper_.eps);
  params_.addcdiv_(state_.exp_avg, denom, -lr / bias_correction1);
}

FlatAdamW::State FlatAdamW::state() const {
  return State{state_.exp_avg.clone(), state_.exp_avg_sq.clone(), state_.steps};
}

void FlatAdamW::load_state(const State& state) {
  torch::NoGradGuard no_grad;
  state_.exp_avg.copy_(state.exp_avg);
  state_.exp_avg_sq.copy_(state.exp_avg_sq);
  state_.steps = state.steps;
}

}  // namespace rcl
