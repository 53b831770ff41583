#include "rocm_conformance_llm/workload/attention_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/version.h>

#include "rocm_conformance_llm/workload/compute_dtype.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"

// at::scaled_dot_product_attention and its backend switches are public from libtorch 2.0;
// on 1.13 the explicit "math" path is the only attention.
#if TORCH_VERSION_MAJOR >= 2
#define RCL_HAVE_SDPA 1
#endif

namespace rcl {
namespace {

std::string torch_version_text() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

// The SDPA kernel switches, in one order: flash, memory-efficient, math (and cuDNN from 2.3,
// so that "sdpa_flash" on an NVIDIA build cannot silently run cuDNN's kernel instead).
#ifdef RCL_HAVE_SDPA
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 3
#define RCL_HAVE_SDPA_CUDNN 1
#endif
std::vector<bool> sdpa_switches() {
  const auto& ctx = at::globalContext();
  std::vector<bool> on = {ctx.userEnabledFlashSDP(), ctx.userEnabledMemEfficientSDP(), ctx.userEnabledMathSDP()};
#ifdef RCL_HAVE_SDPA_CUDNN
  on.push_back(ctx.userEnabledCuDNNSDP());
#endif
  return on;
}

void set_sdpa_switches(const std::vector<bool>& on) {
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(on[0]);
  ctx.setSDPUseMemEfficient(on[1]);
  ctx.setSDPUseMath(on[2]);
#ifdef RCL_HAVE_SDPA_CUDNN
  ctx.setSDPUseCuDNN(on[3]);
#endif
}
#endif

}  // namespace

void select_sdpa_backend(AttentionBackend backend) {
  if (backend == AttentionBackend::math) return;
#ifndef RCL_HAVE_SDPA
  throw ConfigError(std::string("invalid attention_backend='") + name_of(backend) +
                    "': needs libtorch >= 2.0 (this build has " + torch_version_text() + "); allowed here: math");
#else
  const bool any = backend == AttentionBackend::sdpa;
  set_sdpa_switches({any || backend == AttentionBackend::sdpa_flash,
                     any || backend == AttentionBackend::sdpa_mem_efficient,
                     any || backend == AttentionBackend::sdpa_math, any});
#endif
}

bool sdpa_available() {
#ifdef RCL_HAVE_SDPA
  return true;
#else
  return false;
#endif
}

void check_attention_backend(const TrainingConfig& cfg, torch::DeviceType device) {
  const AttentionBackend b = cfg.attention_backend;
  const auto refuse = [&](const std::string& why, const std::string& allowed) {
    throw ConfigError(std::string("invalid attention_backend='") + name_of(b) + "': " + why +
                      "; allowed here: " + allowed);
  };
  if (b == AttentionBackend::math) return;
  if (!sdpa_available()) refuse("needs libtorch >= 2.0 (this build has " + torch_version_text() + ")", "math");
  const bool gpu = device != torch::kCPU;
  const char* all_but_flash = "math, sdpa, sdpa_math, sdpa_mem_efficient";
  // The GPU flash kernels (AOTriton/CK on ROCm, FlashAttention on CUDA) take fp16/bf16 only,
  // and no attention mask; CPU flash takes float32 and masks too.
  if (b == AttentionBackend::sdpa_flash && gpu && cfg.mixed_precision == Precision::fp32)
    refuse("the GPU flash kernel takes fp16/bf16 only (mixed_precision=fp32)", all_but_flash);
  if (b == AttentionBackend::sdpa_flash && gpu && cfg.attention_pad_fraction > 0)
    refuse("the GPU flash kernel takes no attention mask (attention_pad_fraction > 0)", all_but_flash);
  if (b == AttentionBackend::sdpa_mem_efficient && !gpu)
    refuse("libtorch has no memory-efficient attention kernel on the CPU", "math, sdpa, sdpa_math, sdpa_flash");
  // With flash alone allowed, the first step would find no kernel (check_for_dropout, sdp_utils_cpp.h).
  if (b == AttentionBackend::sdpa_flash && !gpu && cfg.dropout > 0)
    refuse("libtorch's CPU flash kernel takes no dropout (dropout > 0)", "math, sdpa, sdpa_math");
}

SdpaBackendScope::SdpaBackendScope(const std::string& backend) {
#ifdef RCL_HAVE_SDPA
  saved_ = sdpa_switches();
#endif
  select_sdpa_backend(parse_enum<AttentionBackend>(backend, "attention_backend"));
}

SdpaBackendScope::~SdpaBackendScope() {
#ifdef RCL_HAVE_SDPA
  set_sdpa_switches(saved_);
#endif
}

int64_t padded_length(int64_t seq, double pad_fraction) {
  return std::max<int64_t>(1, seq - int64_t(std::llround(pad_fraction * double(seq))));
}

torch::Tensor padded_causal_mask(int64_t batch, int64_t seq, double pad_fraction, torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto lengths = torch::full({batch}, seq, opts);
  lengths.slice(0, 1, batch, 2).fill_(padded_length(seq, pad_fraction));
  const auto keys = torch::arange(seq, opts);
  const auto key_ok = keys.view({1, 1, 1, seq}) < lengths.view({batch, 1, 1, 1});
  const auto causal = torch::ones({seq, seq}, opts.dtype(torch::kBool)).tril();
  return causal.view({1, 1, seq, seq}).logical_and(key_ok);
}

torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& allowed, double dropout, bool training) {
  // Each pass over the B x H x T x T scores costs T / head_dim times one over Q, forward and
  // backward: Q is scaled before the GEMM, and the mask is a 0 / -inf bias, added (a sum's
  // backward is the identity; a scaled product or masked_fill each add a pass over the scores'
  // gradient, and in bf16 libtorch's masked_fill is a serial loop). Not in place: the shadow check
  // compares the tapped GEMM's output with its own rerun.
  auto scores = tapped_matmul(q * (1.0 / std::sqrt(double(q.size(-1)))), k.transpose(-2, -1));
  scores = scores + torch::zeros(allowed.sizes(), scores.options())
                        .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  auto probs = scores.softmax(-1, at_least_float(scores.scalar_type())).to(v.scalar_type());
  probs = torch::dropout(probs, dropout, training);
  return tapped_matmul(probs, v);
}

torch::Tensor sdpa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& allowed, double dropout) {
#ifdef RCL_HAVE_SDPA
  if (!allowed.defined())
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true);
  return at::scaled_dot_product_attention(q, k, v, allowed, dropout, /*is_causal=*/false);
#else
  (void)q, (void)k, (void)v, (void)allowed, (void)dropout;
  throw ConfigError("SDPA needs libtorch >= 2.0 (this build has " + torch_version_text() + ")");
#endif
}

std::string sdpa_kernel_choice(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double dropout) {
#ifdef RCL_HAVE_SDPA
  // at::SDPBackend's values, the same from 2.0 on (cudnn and overrideable came later).
  static const char* const kNames[] = {"math", "flash", "mem_efficient", "cudnn", "overrideable"};
  const int64_t choice = allowed.defined() ? at::_fused_sdp_choice(q, k, v, allowed, dropout, /*is_causal=*/false)
                                           : at::_fused_sdp_choice(q, k, v, {}, dropout, /*is_causal=*/true);
  return choice >= 0 && choice < int64_t(std::size(kNames)) ? kNames[choice] : "none";
#else
  (void)q, (void)k, (void)v, (void)allowed, (void)dropout;
  throw ConfigError("SDPA needs libtorch >= 2.0 (this build has " + torch_version_text() + ")");
#endif
}

torch::Tensor repeat_key_value_heads(const torch::Tensor& kv, int64_t groups) {
  const auto s = kv.sizes();
  return kv.unsqueeze(2).expand({s[0], s[1], groups, s[2], s[3]}).reshape({s[0], s[1] * groups, s[2], s[3]});
}

torch::Tensor strided_view_of(const torch::Tensor& v) {
  constexpr int64_t kRowGap = 8;
  return at::constant_pad_nd(v, {0, kRowGap}).narrow(-1, 0, v.size(-1));
}

}  // namespace rcl
