#include "rocm_conformance_llm/workload/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define RCL_HAVE_FUSED_ADAMW 1
#endif

namespace rcl {

bool fused_adamw_available() {
#ifdef RCL_HAVE_FUSED_ADAMW
  return true;
#else
  return false;
#endif
}

FlatAdamW::FlatAdamW(const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& not_decayed,
                     AdamWHyper hyper, ShardOf shard)
    : hyper_(hyper), shard_(shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    throw std::invalid_argument("FlatAdamW: shard index out of range");
  if (hyper_.fused && !fused_adamw_available())
    throw std::invalid_argument("FlatAdamW: the fused AdamW kernel needs libtorch >= 2.4");
  parameters_ = decayed;
  parameters_.insert(parameters_.end(), not_decayed.begin(), not_decayed.end());
  if (parameters_.empty()) throw std::invalid_argument("FlatAdamW: no parameters");
  std::set<const void*> seen;
  int64_t total = 0;
  const auto options = parameters_.front().options();
  for (const auto& p : parameters_) {
    if (!seen.insert(p.unsafeGetTensorImpl()).second)
      throw std::invalid_argument("FlatAdamW: a parameter is listed twice");
    if (p.dtype() != options.dtype() || p.device() != options.device())
      throw std::invalid_argument("FlatAdamW: parameters differ in dtype or device");
    total += p.numel();
  }
  int64_t decayed_numel = 0;  // flat_params_[0, decayed_numel) takes weight decay
  for (const auto& p : decayed) decayed_numel += p.numel();

  torch::NoGradGuard no_grad;
  const int splits = shard.given ? 1 : shard.count;
  const int64_t shard_numel = (total + splits - 1) / splits;
  // Zeros in the padding stay zero: no gradient reaches them, and AdamW maps 0 to 0.
  padded_params_ = torch::zeros({shard_numel * splits}, options);
  padded_grads_ = torch::zeros_like(padded_params_);
  flat_params_ = padded_params_.narrow(0, 0, total);
  flat_grads_ = padded_grads_.narrow(0, 0, total);
  shard_offset_ = shard.given ? 0 : shard_numel * shard.index;
  shard_params_ = padded_params_.narrow(0, shard_offset_, shard_numel);
  shard_grads_ = padded_grads_.narrow(0, shard_offset_, shard_numel);
  decayed_in_shard_ = std::clamp<int64_t>(decayed_numel - shard_offset_, 0, shard_numel);
  int64_t offset = 0;
  for (auto p : parameters_) {
    auto values = flat_params_.narrow(0, offset, p.numel());
    values.copy_(p.detach().reshape({-1}));
    p.set_data(values.view(p.sizes()));
    p.mutable_grad() = flat_grads_.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  state_.exp_avg = torch::zeros_like(shard_params_);
  state_.exp_avg_sq = torch::zeros_like(shard_params_);
}

void FlatAdamW::zero_grad() { padded_grads_.zero_(); }

void FlatAdamW::weigh_norm(const std::vector<double>& per_parameter) {
  if (per_parameter.size() != parameters_.size())
    throw std::invalid_argument("FlatAdamW: one norm weight per parameter expected");
  torch::NoGradGuard no_grad;
  torch::Tensor padded = torch::zeros_like(padded_params_);
  int64_t offset = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    padded.narrow(0, offset, parameters_[i].numel()).fill_(per_parameter[i]);
    offset += parameters_[i].numel();
  }
  shard_norm_weights_ = padded.narrow(0, shard_offset_, shard_params_.numel());
}

torch::Tensor FlatAdamW::clip_grad_norm(double max_norm, const std::function<void(torch::Tensor&)>& sum_over_shards) {
  torch::NoGradGuard no_grad;
  torch::Tensor total;
  if (sharded() || shard_norm_weights_.defined()) {
    // ZeRO's or a split model's global norm: the shards' sums of squares summed over ranks (one
    // 1-element all-reduce), not bit for bit the unsplit norm (another summation order).
    auto squares = shard_norm_weights_.defined() ? shard_grads_.square().mul_(shard_norm_weights_).sum()
                                                 : shard_grads_.square().sum();
    sum_over_shards(squares);
    total = squares.sqrt();
  } else {
    total = flat_grads_.norm();
  }
  if (max_norm > 0) {
    // The same arithmetic as torch::nn::utils::clip_grad_norm_, on the device.
    shard_grads_.mul_((max_norm / (total + 1e-6)).clamp_max(1.0));
  }
  return total;
}

void FlatAdamW::step(double lr, const torch::Tensor& apply) {
  torch::NoGradGuard no_grad;
  const int64_t step = ++state_.steps;
  // Each factor is its own value where the update applies and the identity where it is
  // withheld (0-dim device tensors: same float arithmetic as the scalars). The gradient is
  // zeroed where withheld, as it may hold the NaN that withheld it; an infinite eps turns the
  // parameter update into exactly 0.
  const auto options = shard_params_.options();
  const auto either = [&](double applied, double withheld) {
    return torch::where(apply, torch::full({}, applied, options), torch::full({}, withheld, options));
  };
  shard_grads_.masked_fill_(apply.logical_not(), 0.0);
  if (hyper_.fused) return fused_step(lr, apply, step);
  // torch::optim::AdamW::step's sequence of ops, on the whole shard at once.
  if (decayed_in_shard_ > 0)
    shard_params_.narrow(0, 0, decayed_in_shard_).mul_(either(1.0 - lr * hyper_.weight_decay, 1.0));
  state_.exp_avg.mul_(either(hyper_.beta1, 1.0)).add_(shard_grads_, 1.0 - hyper_.beta1);
  state_.exp_avg_sq.mul_(either(hyper_.beta2, 1.0)).addcmul_(shard_grads_, shard_grads_, 1.0 - hyper_.beta2);
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, double(step));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, double(step));
  const auto denom = (state_.exp_avg_sq.sqrt() / std::sqrt(bias_correction2))
                         .add_(either(hyper_.eps, std::numeric_limits<double>::infinity()));
  shard_params_.addcdiv_(state_.exp_avg, denom, -lr / bias_correction1);
}

void FlatAdamW::fused_step(double lr, const torch::Tensor& apply, int64_t step) {
#ifdef RCL_HAVE_FUSED_ADAMW
  // found_inf = 1 makes the kernel leave parameters and moments untouched (a withheld update),
  // decided on the device. The step count is read from a tensor (float32, as torch.optim's).
  const auto withheld = apply.logical_not().to(torch::kFloat);
  const auto steps = torch::full({}, double(step), shard_params_.options().dtype(torch::kFloat));
  const auto group = [&](int64_t begin, int64_t length, double weight_decay) {
    if (length == 0) return;
    at::_fused_adamw_({shard_params_.narrow(0, begin, length)}, {shard_grads_.narrow(0, begin, length)},
                      {state_.exp_avg.narrow(0, begin, length)}, {state_.exp_avg_sq.narrow(0, begin, length)},
                      /*max_exp_avg_sqs=*/{}, {steps}, lr, hyper_.beta1, hyper_.beta2, weight_decay, hyper_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/{}, withheld);
  };
  group(0, decayed_in_shard_, hyper_.weight_decay);
  group(decayed_in_shard_, shard_params_.numel() - decayed_in_shard_, 0.0);
#else
  (void)lr, (void)apply, (void)step;
#endif
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
