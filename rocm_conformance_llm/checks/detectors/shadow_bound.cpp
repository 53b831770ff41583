#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"

#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include <torch/torch.h>

#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

double accumulation_roundoff(c10::ScalarType dtype) {
  return dtype == c10::kDouble ? unit_roundoff(dtype) : unit_roundoff(c10::kFloat);
}

bool gemm_sums_in_float32(c10::ScalarType dtype, const c10::Device& device) {
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf) return true;
  static std::mutex mutex;
  // Asked at every shadow verdict: a key built without allocating.
  static std::map<std::tuple<c10::DeviceType, c10::DeviceIndex, c10::ScalarType>, bool> answers;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device.type(), device.index(), dtype);
  if (const auto it = answers.find(key); it != answers.end()) return it->second;
  torch::NoGradGuard no_grad;
  AutocastGuard no_autocast(device.type(), AutocastState{.enabled = false});
  const double u = unit_roundoff(dtype);
  const auto n = static_cast<int64_t>(1.0 / u);
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const auto ones = torch::ones({1, 1, n}, options);
  auto terms = torch::full({1, n, 1}, u, options);
  terms.index_put_({0, 0, 0}, 1.0);
  bool fp32 = true;
  try {
    // The plain and the batched GEMM: the model runs both (linear and attention's matmuls).
    for (const auto& sum : {torch::mm(ones[0], terms[0]), torch::bmm(ones, terms)})
      fp32 = fp32 && sum.item<double>() >= 1.75;
  } catch (const c10::Error&) {  // no GEMM in this dtype here (fp16 on libtorch 1.13's CPU)
  }
  return answers[key] = fp32;
}

double gemm_accumulation_roundoff(c10::ScalarType dtype, const c10::Device& device) {
  return gemm_sums_in_float32(dtype, device) ? accumulation_roundoff(dtype) : unit_roundoff(dtype);
}

double largest_finite(c10::ScalarType dtype) {
  return dtype == c10::kHalf       ? 65504.0
         : dtype == c10::kBFloat16 ? 3.38e38
         : dtype == c10::kFloat    ? 3.4e38
                                   : std::numeric_limits<double>::max();
}

double bound_floor(c10::ScalarType dtype) { return dtype == c10::kDouble ? 1e-300 : 1e-12; }

GemmBound gemm_bound(c10::ScalarType dtype, int64_t k, double u_acc) {
  return {.u = unit_roundoff(dtype), .u_acc = u_acc, .sqrt_k = std::sqrt(static_cast<double>(k))};
}

LayerNormBound layer_norm_bound(c10::ScalarType dtype, int64_t d) {
  return {.u = unit_roundoff(dtype), .acc = accumulation_roundoff(dtype) * std::sqrt(double(d))};
}

}  // namespace rcl
