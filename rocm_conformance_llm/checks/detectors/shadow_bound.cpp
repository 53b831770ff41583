#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"

#include <limits>

#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"

namespace rcl {

double accumulation_roundoff(c10::ScalarType dtype) {
  return dtype == c10::kDouble ? unit_roundoff(dtype) : unit_roundoff(c10::kFloat);
}

double largest_finite(c10::ScalarType dtype) {
  return dtype == c10::kHalf       ? 65504.0
         : dtype == c10::kBFloat16 ? 3.38e38
         : dtype == c10::kFloat    ? 3.4e38
                                   : std::numeric_limits<double>::max();
}

double bound_floor(c10::ScalarType dtype) { return dtype == c10::kDouble ? 1e-300 : 1e-12; }

GemmBound gemm_bound(c10::ScalarType dtype, int64_t k) {
  return {
      .u = unit_roundoff(dtype), .u_acc = accumulation_roundoff(dtype), .sqrt_k = std::sqrt(static_cast<double>(k))};
}

LayerNormBound layer_norm_bound(c10::ScalarType dtype, int64_t d) {
  return {.u = unit_roundoff(dtype), .acc = accumulation_roundoff(dtype) * std::sqrt(double(d))};
}

}  // namespace rcl
