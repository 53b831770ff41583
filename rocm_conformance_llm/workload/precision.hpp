// Mixed precision: the autocast region the forward pass runs in, and the fp16 dynamic loss
// scaler. bf16/fp16 move the model's GEMMs onto rocBLAS/hipBLASLt's reduced-precision
// kernels, where precision-specific failures (NaN/Inf only under fp16/bf16) show up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

// Autocast on or off for one device type, and the dtype it casts to.
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::BFloat16;
};

// fp32 -> off, bf16 / fp16 -> on with that dtype.
AutocastState autocast_for(Precision mixed_precision);
// The state currently in force for `device_type` (kCPU or kCUDA, the HIP device on ROCm).
AutocastState current_autocast(torch::DeviceType device_type);

// Puts `state` in force for `device_type` for the guard's lifetime, then restores the
// previous state; leaving the outermost region clears the autocast weight-cast cache, as
// Python's torch.autocast does. Run backward outside the region.
class AutocastGuard {
 public:
  AutocastGuard(torch::DeviceType device_type, AutocastState state);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType device_type_;
  AutocastState previous_;
};

// Whether the model's `dtype` (bf16 or fp16) GEMMs run as float32 GEMMs of operands rounded to
// `dtype`, their result rounded to it (platform/device.hpp choose_reduced_gemm says when and
// why): set once per run before the model runs; the default is libtorch's own kernels.
void set_reduced_gemm_in_float32(c10::ScalarType dtype, bool in_float32);
bool reduced_gemm_in_float32(c10::ScalarType dtype);
// Sets it for a scope and restores it (tests).
class ReducedGemmInFloat32 {
 public:
  ReducedGemmInFloat32(c10::ScalarType dtype, bool in_float32);
  ~ReducedGemmInFloat32();
  ReducedGemmInFloat32(const ReducedGemmInFloat32&) = delete;
  ReducedGemmInFloat32& operator=(const ReducedGemmInFloat32&) = delete;

 private:
  c10::ScalarType dtype_;
  bool previous_;
};

// The model's GEMMs: nn::functional::linear, mm and matmul (batched_matmul.hpp) in the dtype
// autocast (or the first operand) gives them, through libtorch's kernel, or in float32 as set
// above. Differentiable: in float32 the backward's GEMMs run in float32 on the gradient rounded
// to the dtype too.
torch::Tensor gemm_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
torch::Tensor gemm_mm(const torch::Tensor& a, const torch::Tensor& b);
torch::Tensor gemm_matmul(const torch::Tensor& a, const torch::Tensor& b);
// The depthwise convolution of the Q/K/V filter (groups = channels, no bias): on a CPU, libtorch's
// bf16 one is im2col and a GEMM per channel in the same loops, so it follows the same rule.
torch::Tensor gemm_depthwise_conv2d(const torch::Tensor& input, const torch::Tensor& weight);

// fp16 dynamic loss scaling with plain tensor ops (libtorch 1.13 has no GradScaler and no
// CPU kernels for the _amp_* ops). The loss is multiplied by the scale before backward; the
// gradients are divided by it before clipping. A step whose gradients hold Inf/NaN is skipped
// and the scale halves; after `growth_interval` clean steps in a row the scale doubles.
class DynamicLossScaler {
 public:
  DynamicLossScaler(double initial_scale, int64_t growth_interval, double backoff_factor = 0.5,
                    double growth_factor = 2.0);

  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides the gradient by the scale in place; true when any element is non-finite. One
  // host-device sync: the skip decision needs the answer on the host. The trainer passes
  // FlatAdamW's flat gradient, so this is three kernels whatever the model's size.
  bool unscale_and_check(const torch::Tensor& grads) const;
  // Record the step's outcome: back off (and log) on overflow, grow after a clean streak.
  void update(bool found_nonfinite, int64_t step);

  double current_scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_steps_; }

  // What a checkpoint holds (the factors come from the config).
  struct State {
    double scale = 0;
    int64_t clean_streak = 0;
    int64_t skipped_steps = 0;
  };
  State state() const { return {scale_, clean_streak_, skipped_steps_}; }
  void load_state(const State& s) {
    scale_ = s.scale, clean_streak_ = s.clean_streak, skipped_steps_ = s.skipped_steps;
  }

 private:
  double scale_;
  int64_t growth_interval_;
  double backoff_factor_;
  double growth_factor_;
  int64_t clean_streak_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace rcl
