#include "rocm_conformance_llm/workload/precision.hpp"

#include <atomic>
#include <optional>

#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/workload/batched_matmul.hpp"

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

// Read by every GEMM, on whatever thread its backward runs: one relaxed load when off.
std::atomic<unsigned> g_reduced_in_float32{0};

unsigned bit_of(c10::ScalarType dtype) { return dtype == c10::kBFloat16 ? 1u : dtype == c10::kHalf ? 2u : 0u; }

// The dtype a GEMM whose first operand is `a` computes in, when that dtype is to run in float32.
std::optional<c10::ScalarType> float32_instead(const torch::Tensor& a) {
  if (g_reduced_in_float32.load(std::memory_order_relaxed) == 0) return std::nullopt;
  const auto autocast = current_autocast(a.device().type());
  const auto dtype = autocast.enabled && a.is_floating_point() ? autocast.dtype : a.scalar_type();
  if (!reduced_gemm_in_float32(dtype)) return std::nullopt;
  return dtype;
}

// The operand as the reduced-precision GEMM would read it, held in float32 (exactly).
torch::Tensor rounded(const torch::Tensor& t, c10::ScalarType dtype) {
  return t.defined() ? t.to(dtype).to(torch::kFloat) : t;
}

}  // namespace

void set_reduced_gemm_in_float32(c10::ScalarType dtype, bool in_float32) {
  if (in_float32) g_reduced_in_float32.fetch_or(bit_of(dtype));
  else g_reduced_in_float32.fetch_and(~bit_of(dtype));
}

bool reduced_gemm_in_float32(c10::ScalarType dtype) {
  const unsigned bit = bit_of(dtype);
  return bit != 0 && (g_reduced_in_float32.load(std::memory_order_relaxed) & bit) != 0;
}

ReducedGemmInFloat32::ReducedGemmInFloat32(c10::ScalarType dtype, bool in_float32)
    : dtype_(dtype), previous_(reduced_gemm_in_float32(dtype)) {
  set_reduced_gemm_in_float32(dtype, in_float32);
}
ReducedGemmInFloat32::~ReducedGemmInFloat32() { set_reduced_gemm_in_float32(dtype_, previous_); }

namespace {

// `op(round)` as the model's GEMM-like ops run: `round` is the identity (libtorch's kernel in the
// dtype autocast or the operands give), or, where that dtype runs in float32, rounds each operand
// to it in float32 (autocast off); then the result is rounded back to the dtype.
template <class Op>
torch::Tensor computed(const torch::Tensor& first, const Op& op) {
  const auto dtype = float32_instead(first);
  if (!dtype) return op([](const torch::Tensor& t) { return t; });
  AutocastGuard off(first.device().type(), AutocastState{.enabled = false});
  return op([&](const torch::Tensor& t) { return rounded(t, *dtype); }).to(*dtype);
}

}  // namespace

torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return computed(x, [&](const auto& r) { return torch::nn::functional::linear(r(x), r(weight), r(bias)); });
}

torch::Tensor gemm_mm(const torch::Tensor& a, const torch::Tensor& b) {
  return computed(a, [&](const auto& r) { return r(a).mm(r(b)); });
}

torch::Tensor gemm_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  return computed(a, [&](const auto& r) { return batched_matmul(r(a), r(b)); });
}

torch::Tensor gemm_depthwise_conv2d(const torch::Tensor& input, const torch::Tensor& weight) {
  const std::vector<int64_t> ones{1, 1}, zeros{0, 0};  // stride, padding, dilation
  return computed(input, [&](const auto& r) {
    return at::conv2d(r(input), r(weight), torch::Tensor(), ones, zeros, ones, weight.size(0));
  });
}

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
