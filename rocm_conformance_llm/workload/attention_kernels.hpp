// The attention kernels as functions of Q, K, V and a mask: what this build's SDPA can do, its
// backend switches, the masks, the explicit reference path. Apart from the attention layer
// (workload/attention.cpp): they need none of the model, and tests call them on bare tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

// at::scaled_dot_product_attention and its backend switches exist (libtorch >= 2.0).
bool sdpa_available();

// Refuses, at config time, an attention_backend the kernel cannot serve for this dtype, device
// and layout (ConfigError, one line naming the value and what is allowed). `device` is data so
// the GPU rules can be tested on a CPU machine.
void check_attention_backend(const TrainingConfig& cfg, torch::DeviceType device);

// Restricting SDPA to one kernel family pins which GPU implementation (AOTriton/CK flash or
// memory-efficient on ROCm, or the math fallback) the run validates; plain "sdpa" lets libtorch
// choose among all of them; "math" leaves the switches as they are. ConfigError for a fused
// backend without SDPA. The switches are process-global; the model sets them when built.
void select_sdpa_backend(AttentionBackend backend);

// While alive, only `backend`'s kernel family serves SDPA ("sdpa": every family, libtorch
// chooses; "math": left as it is); the previous switches are restored after. The switches are
// process-global in libtorch. ConfigError for a fused backend without SDPA.
class SdpaBackendScope {
 public:
  explicit SdpaBackendScope(const std::string& backend);
  ~SdpaBackendScope();
  SdpaBackendScope(const SdpaBackendScope&) = delete;
  SdpaBackendScope& operator=(const SdpaBackendScope&) = delete;

 private:
  std::vector<bool> saved_;
};

// Padded batches: every second sequence (odd index) keeps round((1 - pad_fraction) * seq)
// tokens (at least 1); the keys past them are padding.
int64_t padded_length(int64_t seq, double pad_fraction);
// Boolean [B, 1, T, T], true where a query may attend: causal, and no padded key. Right padding
// keeps key 0 for every query, so no row is fully masked.
torch::Tensor padded_causal_mask(int64_t batch, int64_t seq, double pad_fraction, torch::Device device);
// The reference path: softmax(Q K^T / sqrt(d), masked to `allowed`) V, two batched GEMMs;
// `allowed` is boolean and broadcasts to [B, H, T, T].
torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& allowed, double dropout = 0.0, bool training = false);
// at::scaled_dot_product_attention with the kernels enabled now; `allowed` undefined means
// causal (is_causal). ConfigError without SDPA.
torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& allowed, double dropout = 0.0);
// The kernel sdpa_attention would run for these inputs with the kernels enabled now, as
// libtorch's dispatcher picks it (at::_fused_sdp_choice): "flash", "mem_efficient", "cudnn",
// "overrideable", "math" (no fused kernel takes the call) or "none". ConfigError without SDPA.
std::string sdpa_kernel_choice(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double dropout);
// K or V [B, KV, T, D] -> [B, KV * groups, T, D]: head j serves query heads j*groups ..
// (j+1)*groups - 1, as Hugging Face's repeat_kv (expand + reshape).
torch::Tensor repeat_key_value_heads(const torch::Tensor& kv, int64_t groups);
// The same values as `v` [.., T, D], as a strided view whose rows are D + 8 elements apart
// (last dimension still contiguous, as the fused kernels require): fused kernels that assumed
// V's row stride gave wrong results (ROCm/pytorch#3230).
torch::Tensor strided_view_of(const torch::Tensor& v);

}  // namespace rcl
