#include "rocm_conformance_llm/workload/adamw_host_loop.hpp"

#include <cmath>

namespace rcl {

void adamw_host_loop(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                     const AdamWStepFactors& f) {
  // torch::optim::AdamW's arithmetic, element by element: decay, both moments, then the step.
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float m = exp_avg[i] * f.beta1 + g * (1.0f - f.beta1);
    const float v = exp_avg_sq[i] * f.beta2 + g * g * (1.0f - f.beta2);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    params[i] = params[i] * f.decay_factor - f.step_size * (m / (std::sqrt(v) / f.bias_correction2_sqrt + f.eps));
  }
}

}  // namespace rcl
