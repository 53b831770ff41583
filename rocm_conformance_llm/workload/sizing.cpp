#include "rocm_conformance_llm/workload/sizing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/workload/lm_head.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {
namespace {

// The shapes and element sizes every formula reads (docs/sizing.md names them the same way).
struct Shape {
  int64_t B, T, BT, C, H, K, F, F_up, L, V;  // K: width of K and of V (C without GQA)
  int64_t a;                                 // bytes of an activation: the autocast dtype (2 for bf16/fp16), else 4
  int64_t r;                                 // bytes of the residual stream and of the parameters: float32
  int64_t drop;  // bytes per element a dropout keeps for backward: a bool mask on an accelerator
                 // (native_dropout), the scaled noise in the input's dtype on the CPU
  bool autocast, math_scores, padded, dropout, rotary, qk_norm, conv, sandwich, strided_v, swiglu;
  bool keep_attention;  // checkpointing keeps the attention kernel's tensors, recomputes the rest
  // Three refinements measured on the host (tests/unit/test_sizing.cpp). An accelerator keeps the
  // coarser count until they are measured there: its SDPA peaks already run above the model.
  // - the heads-merged attention output is a copy of the kernel's output (the math path's
  //   B x H x T x D product), not a view of it (the fused kernels write B x T x H x D);
  bool merged_output_copy;
  // - the QKV output stays alive only while a view of it is saved: rotary makes new Q and K
  //   (keeping only cos and sin) and grouped-query attention copies K and V;
  bool qkv_output_kept;
  // - the MLP's backward frees its down projection's saved input as it makes that input's gradient.
  bool mlp_gradient_replaces_saved;
};

Shape shape_of(const TrainingConfig& cfg, const DeviceDescription& device) {
  Shape s{};
  s.B = cfg.batch_size;
  s.T = cfg.seq_len;
  s.BT = s.B * s.T;
  s.C = cfg.hidden_size;
  s.H = cfg.num_heads;
  s.K = key_value_width(cfg);
  s.F = ffn_hidden_size(cfg);
  s.swiglu = cfg.activation == Activation::swiglu;
  s.F_up = s.swiglu ? 2 * s.F : s.F;
  s.L = cfg.num_layers;
  s.V = cfg.vocab_size;
  s.autocast = cfg.mixed_precision != Precision::fp32;
  s.a = s.autocast ? 2 : 4;
  s.r = 4;
  s.drop = device.accelerator ? 1 : s.a;
  s.dropout = cfg.dropout > 0;
  // The explicit path and SDPA's math fallback materialise B x H x T x T scores; the fused
  // kernels keep a log-sum-exp per query instead. libtorch's CPU flash kernel takes no dropout
  // (sdp_utils_cpp.h check_for_dropout): SDPA on the host with dropout runs its math kernel.
  s.math_scores = cfg.attention_backend == AttentionBackend::math ||
                  cfg.attention_backend == AttentionBackend::sdpa_math ||
                  (!device.accelerator && s.dropout && cfg.attention_backend == AttentionBackend::sdpa);
  s.padded = cfg.attention_pad_fraction > 0;
  s.rotary = cfg.position == PositionEncoding::rotary;
  s.qk_norm = cfg.qk_norm;
  s.conv = cfg.qkv_conv_kernel > 0;
  s.sandwich = cfg.norm_layout == NormLayout::sandwich;
  s.strided_v = cfg.attention_noncontiguous_v;
  s.keep_attention = cfg.activation_checkpointing && cfg.checkpoint_keep_attention;
  const bool q_view_saved = s.qk_norm || !s.rotary;  // by the Q norm, else by the kernel
  const bool k_view_saved = s.qk_norm || (!s.rotary && s.K == s.C);
  const bool v_view_saved = s.K == s.C && !s.strided_v;
  s.merged_output_copy = s.math_scores || device.accelerator;
  s.qkv_output_kept = q_view_saved || k_view_saved || v_view_saved || device.accelerator;
  s.mlp_gradient_replaces_saved = !device.accelerator;
  return s;
}

// One block's tensors autograd keeps for backward, in bytes per token, in forward order: up to
// the attention kernel, then from the output projection on (backward frees these first). Up to
// the kernel in two parts: what only the norm and the Q/K/V projection keep (checkpointing that
// keeps attention recomputes it), then what the kernel's backward reads and its output.
int64_t before_attention_kernel_bytes_per_token(const Shape& s) {
  int64_t b = 0;
  b += s.r * s.C;                                     // block input (LayerNorm 1 keeps it)
  b += s.a * s.C;                                     // LayerNorm 1 output as the QKV GEMM reads it
  if (s.conv) b += s.a * (s.C + 2 * s.K);             // the left-padded copy the convolution keeps
  if (s.qk_norm && s.autocast) b += 4 * (s.C + s.K);  // float32 copies of Q and K the norms keep
  return b;
}

int64_t attention_kernel_bytes_per_token(const Shape& s) {
  int64_t b = 0;
  if (s.qkv_output_kept) b += s.a * (s.C + 2 * s.K);  // QKV output (Q, K, V are views of it)
  if (s.qk_norm || s.rotary) b += s.a * (s.C + s.K);  // new Q and K (normed and/or rotated)
  if (s.K < s.C) b += 2 * s.a * s.C;                  // GQA: K and V repeated to every query head
  if (!s.math_scores) b += s.a * s.C + 4 * s.H;       // fused attention output and log-sum-exp
  if (s.strided_v) b += s.a * (s.C + 8 * s.H);        // V padded by 8 per row (strided view)
  return b;
}

int64_t attention_bytes_per_token(const Shape& s) {
  return before_attention_kernel_bytes_per_token(s) + attention_kernel_bytes_per_token(s);
}

// The attention output with its heads merged, the projection's input: its own tensor only where
// it is a copy of the kernel's output.
int64_t merged_output_bytes_per_token(const Shape& s) { return s.merged_output_copy ? s.a * s.C : 0; }

int64_t projection_and_mlp_bytes_per_token(const Shape& s) {
  int64_t b = 0;
  b += merged_output_bytes_per_token(s);  // attention output, heads merged (proj input)
  if (s.sandwich) b += 2 * 4 * s.C;      // float32 inputs of the two post-norms
  if (s.dropout) b += 2 * s.drop * s.C;  // residual-branch dropout masks
  b += s.r * s.C;                        // residual after attention (LayerNorm 2 keeps it)
  b += s.a * s.C;                        // LayerNorm 2 output as the MLP reads it
  b += s.a * s.F_up;                     // MLP up projection output
  b += s.a * s.F * (s.swiglu ? 2 : 1);   // activation output (SwiGLU: silu and product)
  return b;
}

int64_t block_bytes_per_token(const Shape& s) {
  return attention_bytes_per_token(s) + projection_and_mlp_bytes_per_token(s);
}

// One block's attention tensors that grow with T^2 rather than with tokens, in bytes.
int64_t block_score_bytes(const Shape& s) {
  const int64_t scores = s.B * s.H * s.T * s.T;
  const int64_t mask = (s.padded ? s.B : 1) * s.T * s.T;  // a bool per (query, key), made per layer
  if (s.math_scores) {
    // softmax output (float32) and what the AV GEMM reads: its bf16 copy, or the dropout's
    // mask and output.
    const int64_t per_score = 4 + (s.dropout ? s.drop + s.a : (s.autocast ? s.a : 0));
    return scores * per_score + mask;
  }
  // SDPA turns a boolean mask into an additive one in the query's dtype and keeps it.
  return s.padded ? s.B * s.T * s.T * s.a : 0;
}

// What backward holds beside the saved tensors while it differentiates one block: the MLP's
// gradients, or on the math path two float32 score gradients (of the probabilities and of the
// scores), by when the block's projection and MLP tensors are already freed.
int64_t block_backward_workspace(const Shape& s) {
  const int64_t mlp = s.BT * (s.a * s.F_up + (s.mlp_gradient_replaces_saved ? 0 : s.a * s.F) + 2 * s.r * s.C);
  const int64_t scores = s.math_scores ? s.B * s.H * s.T * s.T * 8 - s.BT * projection_and_mlp_bytes_per_token(s) : 0;
  return std::max(mlp, scores);
}

// What checkpointing that keeps attention keeps of one block beside its input: the kernel's
// tensors (on the math path its scores too) and the heads-merged output the recomputed rest
// starts from (the projection's input).
int64_t kept_attention_bytes(const Shape& s) {
  return s.BT * (attention_kernel_bytes_per_token(s) + merged_output_bytes_per_token(s)) + block_score_bytes(s);
}

// The forward FLOPs checkpointing runs again in backward, per token: a third of the blocks'
// training FLOPs (a GEMM's forward is 2 of its 6 per parameter, attention's QK^T and AV 4 of
// 12 L C T), less attention's where its output is kept. The LM head (6 V C) is not recomputed.
double recomputed_flops_per_token(const TrainingConfig& cfg, const Shape& s) {
  if (!cfg.activation_checkpointing) return 0.0;
  const double attention = 12.0 * double(s.L) * double(s.C) * double(s.T);
  const double head = 6.0 * double(s.V) * double(s.C);
  return (flops_per_token(cfg) - head - (s.keep_attention ? attention : 0.0)) / 3.0;
}

int64_t sum(const std::vector<MemoryTerm>& terms) {
  return std::accumulate(terms.begin(), terms.end(), int64_t{0},
                         [](int64_t total, const MemoryTerm& t) { return total + t.bytes; });
}

nlohmann::json terms_json(const std::vector<MemoryTerm>& terms) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& t : terms) out[t.name] = t.bytes;
  return out;
}

}  // namespace

SizingPrediction predict_step(const TrainingConfig& composed, const DeviceDescription& device) {
  TrainingConfig cfg = composed;
  cfg.vocab_size = resolved_vocab_size(cfg);
  require_resolved(cfg.attention_backend, "the step's sizing");
  const Shape s = shape_of(cfg, device);
  SizingPrediction p;
  p.parameters = parameter_count(cfg);
  p.vocab_size = s.V;
  const int64_t P = p.parameters;
  const int64_t gemm_parameters = gemm_parameter_count(cfg);
  const int64_t kept_attention = s.keep_attention ? kept_attention_bytes(s) : 0;

  p.resident = {
      {"parameters", 4 * P, "4 P (float32)"},
      {"gradients", 4 * P, "4 P (FlatAdamW's flat float32 gradient)"},
      {"optimizer_state", 8 * P, "8 P (AdamW: exp_avg and exp_avg_sq in float32)"},
  };
  if (cfg.memory_pressure_bytes > 0)
    p.resident.push_back({"ballast", cfg.memory_pressure_bytes, "memory_pressure_bytes"});

  p.activation_bytes_per_layer = s.BT * block_bytes_per_token(s) + block_score_bytes(s);
  p.checkpointed_activation_bytes_per_layer = s.BT * s.r * s.C + kept_attention;
  const int64_t around_blocks =
      s.BT * ((s.dropout ? s.drop * s.C : 0) + s.r * s.C + s.a * s.C);  // embedding dropout, final norm in/out
  // The chunked loss (workload/lm_head.hpp) holds one chunk's logits, float32 log-softmax and
  // gradients at a time, beside the head weight cast over the padded rows, its float32 gradient
  // and the gradient of the hidden rows: never the whole batch's logits.
  const int64_t logits =
      std::min(s.BT, kLossChunkTokens) * 12 * s.V + (s.a + 4) * padded_vocab(s.V) * s.C + s.a * s.BT * s.C;
  const std::string logits_formula = fmt::format("12 min(B T, {}) V + (a + 4) V_64 C + a B T C", kLossChunkTokens);
  const int64_t workspace = block_backward_workspace(s);
  if (s.autocast)
    p.step.push_back(
        {"autocast_weights", s.a * gemm_parameters, "a N_gemm (weights cast for the GEMMs, kept for backward)"});
  if (cfg.activation_checkpointing) {
    // Backward starts with the loss (logits alive), then recomputes one block at a time: the
    // whole of it, or with attention kept the part after the kernel, the larger one.
    const int64_t recompute =
        (s.keep_attention ? s.BT * projection_and_mlp_bytes_per_token(s) : p.activation_bytes_per_layer) + workspace;
    p.step.push_back({"activations", s.L * s.BT * s.r * s.C + around_blocks,
                      "L B T r C + B T (r + a) C (checkpointed: each block keeps its input)"});
    if (s.keep_attention)
      p.step.push_back(
          {"kept_attention", s.L * kept_attention, "L (B T (attention kernel's tensors + a C) + its scores and mask)"});
    if (logits >= recompute) p.step.push_back({"logits_and_loss", logits, logits_formula});
    else p.step.push_back({"recomputed_block", recompute, "one block's activations, scores and backward workspace"});
  } else {
    p.step.push_back({"activations", s.L * s.BT * block_bytes_per_token(s) + around_blocks,
                      "L B T (per-block bytes per token) + B T (r + a) C"});
    if (const int64_t scores = s.L * block_score_bytes(s); scores > 0)
      p.step.push_back({"attention_scores", scores, s.math_scores ? "L (B H T^2 (4 + a) + mask)" : "L B T^2 a (mask)"});
    p.step.push_back(logits >= workspace ? MemoryTerm{"logits_and_loss", logits, logits_formula}
                                         : MemoryTerm{"backward_workspace", workspace, "one block's gradients"});
  }
  // The one-pass update (ATen's fused kernel, or the host loop before libtorch 2.4) works in
  // place; the plain update's whole-buffer ops allocate sqrt(v) and its quotient.
  p.optimizer = {fused_adamw_available(device.accelerator ? torch::kCUDA : torch::kCPU)
                     ? MemoryTerm{"update_temporaries", 0, "0 (a one-pass AdamW, in place)"}
                     : MemoryTerm{"update_temporaries", 8 * P, "8 P (sqrt(v) and its quotient, float32)"}};

  const int64_t resident = sum(p.resident), step = sum(p.step), update = sum(p.optimizer);
  p.peak_phase = step >= update ? "backward" : "optimizer";
  p.allocated_peak_bytes = resident + std::max(step, update);
  p.allocator_slack_bytes =
      device.accelerator ? int64_t(std::llround(kAllocatorSlackFraction * double(p.allocated_peak_bytes))) : 0;
  p.peak_bytes = p.allocated_peak_bytes + p.allocator_slack_bytes;

  p.tokens_per_step = s.BT * cfg.grad_accum_steps;
  p.model_flops_per_step = flops_per_token(cfg) * double(p.tokens_per_step);
  p.hardware_flops_per_step = p.model_flops_per_step + recomputed_flops_per_token(cfg, s) * double(p.tokens_per_step);
  p.ideal_step_s = device.peak_flops > 0 ? p.hardware_flops_per_step / device.peak_flops : 0.0;
  return p;
}

nlohmann::json SizingPrediction::to_json() const {
  return {{"parameters", parameters},
          {"vocab_size", vocab_size},
          {"resident_bytes", terms_json(resident)},
          {"step_bytes", terms_json(step)},
          {"optimizer_bytes", terms_json(optimizer)},
          {"activation_bytes_per_layer", activation_bytes_per_layer},
          {"checkpointed_activation_bytes_per_layer", checkpointed_activation_bytes_per_layer},
          {"peak_phase", peak_phase},
          {"allocated_peak_bytes", allocated_peak_bytes},
          {"allocator_slack_bytes", allocator_slack_bytes},
          {"peak_bytes", peak_bytes},
          {"tokens_per_step", tokens_per_step},
          {"model_flops_per_step", model_flops_per_step},
          {"hardware_flops_per_step", hardware_flops_per_step},
          {"ideal_step_s", ideal_step_s}};
}

std::string gib_text(int64_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(int64_t{1} << 30)); }

}  // namespace rcl
