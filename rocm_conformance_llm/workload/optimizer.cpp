#include "rocm_conformance_llm/workload/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include <torch/version.h>

#include "rocm_conformance_llm/workload/adamw_host_loop.hpp"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define RCL_HAVE_FUSED_ADAMW 1
#endif

namespace rcl {

bool fused_adamw_available(torch::DeviceType device) {
#ifdef RCL_HAVE_FUSED_ADAMW
  (void)device;
  return true;
#else
  return device == torch::kCPU;
#endif
}

FlatAdamW::FlatAdamW(const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& not_decayed,
                     AdamWHyper hyper, ShardOf shard, const std::vector<torch::Tensor>& local)
    : hyper_(hyper), shard_(shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    throw std::invalid_argument("FlatAdamW: shard index out of range");
  std::set<const void*> is_local;
  for (const auto& p : local) is_local.insert(p.unsafeGetTensorImpl());
  // Storage order: local decayed, local not decayed, then the shared ones likewise.
  std::vector<torch::Tensor> local_order;
  int64_t local_decayed = 0, shared_decayed = 0;
  for (const auto* group : {&decayed, &not_decayed})
    for (const auto& p : *group) {
      const bool mine = is_local.count(p.unsafeGetTensorImpl()) > 0;
      (mine ? local_order : shared_parameters_).push_back(p);
      if (group == &decayed) (mine ? local_decayed : shared_decayed) += p.numel();
    }
  parameters_ = shared_parameters_;
  parameters_.insert(parameters_.end(), local_order.begin(), local_order.end());
  if (parameters_.empty()) throw std::invalid_argument("FlatAdamW: no parameters");
  if (local_order.size() != is_local.size())
    throw std::invalid_argument("FlatAdamW: a local parameter is neither decayed nor not decayed");
  std::set<const void*> seen;
  int64_t local_total = 0, shared_total = 0;
  const auto options = parameters_.front().options();
  for (const auto& p : parameters_) {
    if (!seen.insert(p.unsafeGetTensorImpl()).second)
      throw std::invalid_argument("FlatAdamW: a parameter is listed twice");
    if (p.dtype() != options.dtype() || p.device() != options.device())
      throw std::invalid_argument("FlatAdamW: parameters differ in dtype or device");
    (is_local.count(p.unsafeGetTensorImpl()) ? local_total : shared_total) += p.numel();
  }

  if (hyper_.fused && !fused_adamw_available(options.device().type()))
    throw std::invalid_argument("FlatAdamW: a one-pass AdamW off the CPU needs libtorch >= 2.4");
#ifndef RCL_HAVE_FUSED_ADAMW
  if (hyper_.fused && options.dtype() != torch::kFloat)
    throw std::invalid_argument("FlatAdamW: the host AdamW loop takes float32 parameters");
#endif

  torch::NoGradGuard no_grad;
  const int splits = shard.given ? 1 : shard.count;
  const int64_t shard_numel = (shared_total + splits - 1) / splits;
  // Zeros in the padding stay zero: no gradient reaches them, and AdamW maps 0 to 0.
  storage_params_ = torch::zeros({local_total + shard_numel * splits}, options);
  storage_grads_ = torch::zeros_like(storage_params_);
  flat_params_ = storage_params_.narrow(0, 0, local_total + shared_total);
  flat_grads_ = storage_grads_.narrow(0, 0, local_total + shared_total);
  padded_params_ = storage_params_.narrow(0, local_total, shard_numel * splits);
  padded_grads_ = storage_grads_.narrow(0, local_total, shard_numel * splits);
  local_grads_ = storage_grads_.narrow(0, 0, local_total);
  shard_offset_ = shard.given ? 0 : shard_numel * shard.index;
  shard_params_ = padded_params_.narrow(0, shard_offset_, shard_numel);
  shard_grads_ = padded_grads_.narrow(0, shard_offset_, shard_numel);
  int64_t local_at = 0, shared_at = local_total;
  for (auto p : parameters_) {
    int64_t& offset = is_local.count(p.unsafeGetTensorImpl()) ? local_at : shared_at;
    offsets_.push_back(offset);
    auto values = flat_params_.narrow(0, offset, p.numel());
    values.copy_(p.detach().reshape({-1}));
    p.set_data(values.view(p.sizes()));
    p.mutable_grad() = flat_grads_.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  state_.exp_avg = torch::zeros({local_total + shard_numel}, options);
  state_.exp_avg_sq = torch::zeros_like(state_.exp_avg);
  const auto add_updated = [&](const torch::Tensor& params, const torch::Tensor& grads, int64_t moments_at,
                               int64_t decayed_numel, int64_t storage_offset) {
    if (params.numel() == 0 && !updated_.empty()) return;
    updated_.push_back(Updated{.params = params,
                               .grads = grads,
                               .exp_avg = state_.exp_avg.narrow(0, moments_at, params.numel()),
                               .exp_avg_sq = state_.exp_avg_sq.narrow(0, moments_at, params.numel()),
                               .norm_weights = {},
                               .decayed = std::clamp<int64_t>(decayed_numel, 0, params.numel()),
                               .offset = storage_offset});
  };
  if (local_total > 0) add_updated(storage_params_.narrow(0, 0, local_total), local_grads_, 0, local_decayed, 0);
  add_updated(shard_params_, shard_grads_, local_total, shared_decayed - shard_offset_, local_total + shard_offset_);
}

void FlatAdamW::zero_grad() { storage_grads_.zero_(); }

void FlatAdamW::weigh_norm(const std::vector<double>& per_parameter) {
  if (per_parameter.size() != parameters_.size())
    throw std::invalid_argument("FlatAdamW: one norm weight per parameter expected");
  torch::NoGradGuard no_grad;
  torch::Tensor storage = torch::zeros_like(storage_params_);
  for (size_t i = 0; i < parameters_.size(); ++i)
    storage.narrow(0, offsets_[i], parameters_[i].numel()).fill_(per_parameter[i]);
  for (auto& part : updated_) part.norm_weights = storage.narrow(0, part.offset, part.params.numel());
  weighed_ = true;
}

torch::Tensor FlatAdamW::clip_grad_norm(double max_norm, const std::function<void(torch::Tensor&)>& sum_over_shards) {
  torch::NoGradGuard no_grad;
  torch::Tensor total;
  if (sharded() || weighed_) {
    // ZeRO's or a split model's global norm: the shards' sums of squares summed over ranks (one
    // 1-element all-reduce), not bit for bit the unsplit norm (another summation order).
    torch::Tensor squares;
    for (const auto& part : updated_) {
      auto mine = weighed_ ? part.grads.square().mul_(part.norm_weights).sum() : part.grads.square().sum();
      squares = squares.defined() ? squares.add_(mine) : mine;
    }
    sum_over_shards(squares);
    total = squares.sqrt();
  } else {
    total = flat_grads_.norm();
  }
  if (max_norm > 0) {
    // The same arithmetic as torch::nn::utils::clip_grad_norm_, on the device.
    const auto factor = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (auto& part : updated_) part.grads.mul_(factor);
  }
  return total;
}

void FlatAdamW::step(double lr, const torch::Tensor& apply) {
  torch::NoGradGuard no_grad;
  const int64_t step = ++state_.steps;
  // Each factor is its own value where the update applies and the identity where it is
  // withheld (0-dim device tensors: same float arithmetic as the scalars). The gradient is
  // zeroed where withheld, as it may hold the NaN that withheld it; an infinite eps turns the
  // parameter update into exactly 0. The fused kernel needs neither: it returns at found_inf
  // without reading the gradient (the zeroing was a whole-gradient pass, ~1 ms of a 175 ms
  // cpu-medium step).
  const auto options = shard_params_.options();
  const auto either = [&](double applied, double withheld) {
    return torch::where(apply, torch::full({}, applied, options), torch::full({}, withheld, options));
  };
  for (auto& part : updated_) {
    if (hyper_.fused) {
      fused_step(part, lr, apply, step);
      continue;
    }
    part.grads.masked_fill_(apply.logical_not(), 0.0);
    // torch::optim::AdamW::step's sequence of ops, on the whole piece at once.
    if (part.decayed > 0) part.params.narrow(0, 0, part.decayed).mul_(either(1.0 - lr * hyper_.weight_decay, 1.0));
    part.exp_avg.mul_(either(hyper_.beta1, 1.0)).add_(part.grads, 1.0 - hyper_.beta1);
    part.exp_avg_sq.mul_(either(hyper_.beta2, 1.0)).addcmul_(part.grads, part.grads, 1.0 - hyper_.beta2);
    const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, double(step));
    const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, double(step));
    const auto denom = (part.exp_avg_sq.sqrt() / std::sqrt(bias_correction2))
                           .add_(either(hyper_.eps, std::numeric_limits<double>::infinity()));
    part.params.addcdiv_(part.exp_avg, denom, -lr / bias_correction1);
  }
}

void FlatAdamW::fused_step(Updated& part, double lr, const torch::Tensor& apply, int64_t step) {
#ifdef RCL_HAVE_FUSED_ADAMW
  // found_inf = 1 makes the kernel leave parameters and moments untouched (a withheld update),
  // decided on the device. The step count is read from a tensor (float32, as torch.optim's).
  const auto withheld = apply.logical_not().to(torch::kFloat);
  const auto steps = torch::full({}, double(step), part.params.options().dtype(torch::kFloat));
  const auto group = [&](int64_t begin, int64_t length, double weight_decay) {
    if (length == 0) return;
    at::_fused_adamw_({part.params.narrow(0, begin, length)}, {part.grads.narrow(0, begin, length)},
                      {part.exp_avg.narrow(0, begin, length)}, {part.exp_avg_sq.narrow(0, begin, length)},
                      /*max_exp_avg_sqs=*/{}, {steps}, lr, hyper_.beta1, hyper_.beta2, weight_decay, hyper_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/{}, withheld);
  };
  group(0, part.decayed, hyper_.weight_decay);
  group(part.decayed, part.params.numel() - part.decayed, 0.0);
#else
  // On the host the flag is read where it lies (no device sync to avoid).
  if (!*apply.data_ptr<bool>()) return;
  const double bias_correction1 = 1.0 - std::pow(hyper_.beta1, double(step));
  const double bias_correction2 = 1.0 - std::pow(hyper_.beta2, double(step));
  const auto loop = [&](int64_t begin, int64_t length, double weight_decay) {
    const AdamWStepFactors factors{.decay_factor = float(1.0 - lr * weight_decay),
                                   .beta1 = float(hyper_.beta1),
                                   .beta2 = float(hyper_.beta2),
                                   .step_size = float(lr / bias_correction1),
                                   .bias_correction2_sqrt = float(std::sqrt(bias_correction2)),
                                   .eps = float(hyper_.eps)};
    adamw_host_loop(part.params.data_ptr<float>() + begin, part.grads.data_ptr<float>() + begin,
                    part.exp_avg.data_ptr<float>() + begin, part.exp_avg_sq.data_ptr<float>() + begin, length, factors);
  };
  loop(0, part.decayed, hyper_.weight_decay);
  loop(part.decayed, part.params.numel() - part.decayed, 0.0);
#endif
}

FlatAdamW::State FlatAdamW::state() const { return state_on(state_.exp_avg.device()); }

FlatAdamW::State FlatAdamW::state_on(const torch::Device& where) const {
  return State{state_.exp_avg.to(where, /*non_blocking=*/false, /*copy=*/true),
               state_.exp_avg_sq.to(where, /*non_blocking=*/false, /*copy=*/true), state_.steps};
}

void FlatAdamW::load_state(const State& state) {
  torch::NoGradGuard no_grad;
  state_.exp_avg.copy_(state.exp_avg);
  state_.exp_avg_sq.copy_(state.exp_avg_sq);
  state_.steps = state.steps;
}

}  // namespace rcl
