#include "rocm_conformance_llm/workload/precision.hpp"

#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/errors.hpp"

// libtorch 2.4 replaced the per-device autocast setters with ones taking a DeviceType.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define RCL_AUTOCAST_DEVICE_TYPE_API 1
#endif

namespace rcl {
namespace {

void require_autocast_device(torch::DeviceType device_type) {
  if (device_type != torch::kCPU && device_type != torch::kCUDA)
    throw ConfigError("autocast: unsupported device type " + c10::DeviceTypeName(device_type) +
                      ": allowed cpu, cuda (the HIP device on ROCm)");
}

void apply(torch::DeviceType device_type, const AutocastState& state) {
#ifdef RCL_AUTOCAST_DEVICE_TYPE_API
  at::autocast::set_autocast_enabled(device_type, state.enabled);
  at::autocast::set_autocast_dtype(device_type, state.dtype);
#else
  if (device_type == torch::kCPU) {
    at::autocast::set_cpu_enabled(state.enabled);
    at::autocast::set_autocast_cpu_dtype(state.dtype);
  } else {
    at::autocast::set_enabled(state.enabled);
    at::autocast::set_autocast_gpu_dtype(state.dtype);
  }
#endif
}

}  // namespace

AutocastState autocast_for(Precision mixed_precision) {
  switch (mixed_precision) {
    case Precision::fp32: return {false, c10::ScalarType::BFloat16};
    case Precision::bf16: return {true, c10::ScalarType::BFloat16};
    case Precision::fp16: return {true, c10::ScalarType::Half};
  }
  return {};
}

AutocastState current_autocast(torch::DeviceType device_type) {
  require_autocast_device(device_type);
#ifdef RCL_AUTOCAST_DEVICE_TYPE_API
  return {at::autocast::is_autocast_enabled(device_type), at::autocast::get_autocast_dtype(device_type)};
#else
  if (device_type == torch::kCPU) return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
  return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
#endif
}

AutocastGuard::AutocastGuard(torch::DeviceType device_type, AutocastState state)
    : device_type_(device_type), previous_(current_autocast(device_type)) {
  apply(device_type_, state);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // The cache holds the reduced-precision copies of the weights; it is only valid while the
  // weights do not change, i.e. within one forward pass.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  apply(device_type_, previous_);
}

DynamicLossScaler::DynamicLossScaler(double initial_scale, int64_t growth_interval, double backoff_factor,
                                     double growth_factor)
    : scale_(initial_scale),
      growth_interval_(growth_interval),
      backoff_factor_(backoff_factor),
      growth_factor_(growth_factor) {}

torch::Tensor DynamicLossScaler::scale(const torch::Tensor& loss) const { return loss * scale_; }

bool DynamicLossScaler::unscale_and_check(const torch::Tensor& grads) const {
  grads.mul_(1.0 / scale_);
  return !grads.isfinite().all().item<bool>();
}

void DynamicLossScaler::update(bool found_nonfinite, int64_t step) {
  if (found_nonfinite) {
    ++skipped_steps_;
    clean_streak_ = 0;
    const double old_scale = scale_;
    scale_ *= backoff_factor_;
    spdlog::warn("step {}: fp16 gradients overflowed, update skipped, loss scale {} -> {}", step, old_scale, scale_);
    return;
  }
  if (++clean_streak_ >= growth_interval_) {
    scale_ *= growth_factor_;
    clean_streak_ = 0;
  }
}

}  // namespace rcl
