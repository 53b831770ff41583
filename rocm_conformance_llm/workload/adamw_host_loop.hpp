// AdamW in one pass over float32 host buffers: what ATen's fused CPU kernel (libtorch >= 2.4)
// does, for the libtorch builds that lack it. The plain update is a dozen whole-buffer ops
// (cpu-medium, libtorch 1.13: 6.3 of a 144 ms step); one pass reads and writes each buffer
// once. Plain C++ without libtorch's headers: its file is compiled with -fno-math-errno, so
// that sqrtf vectorizes (CMakeLists.txt).
#pragma once

#include <cstdint>

namespace rcl {

struct AdamWStepFactors {
  float decay_factor;           // 1 - lr * weight_decay (1 for the undecayed parameters)
  float beta1, beta2;           // the moments' decays
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
};

// params, exp_avg, exp_avg_sq updated in place from grads, elements [0, n), on the OpenMP
// threads libtorch uses (the same pool).
void adamw_host_loop(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                     const AdamWStepFactors& f);

}  // namespace rcl
