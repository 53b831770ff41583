// The model's attention layer (CausalSelfAttention, declared in model.hpp): a piece of the model
// itself, apart from model.cpp for its size; the kernels it calls are workload/attention_kernels.*.
#include "rocm_conformance_llm/model.hpp"

#include "rocm_conformance_llm/workload/compute_dtype.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace F = torch::nn::functional;
namespace {

// Rotary position embedding (GPT-NeoX "rotate half" form) on x [B, heads, T, head_dim].
torch::Tensor apply_rotary(const torch::Tensor& x) {
  const int64_t seq = x.size(2);
  const int64_t head_dim = x.size(3);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(x.device());
  const auto inv_freq = torch::pow(10000.0, -torch::arange(0, head_dim, 2, opts) / double(head_dim));
  const auto angles = torch::outer(torch::arange(seq, opts), inv_freq);
  const auto full = torch::cat({angles, angles}, -1);  // [T, head_dim]
  const auto compute = at_least_float(x.scalar_type());
  const auto xc = x.to(compute);
  const auto cos = full.cos().to(compute);
  const auto sin = full.sin().to(compute);
  const auto x1 = xc.slice(-1, 0, head_dim / 2);
  const auto x2 = xc.slice(-1, head_dim / 2);
  const auto rotated = torch::cat({-x2, x1}, -1);
  return (xc * cos + rotated * sin).to(x.scalar_type());
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const TrainingConfig& cfg, const ModelOptions& options)
    : num_heads_(cfg.num_heads),
      kv_heads_(key_value_heads(cfg)),
      head_dim_(cfg.hidden_size / cfg.num_heads),
      dropout_(cfg.dropout),
      rotary_(cfg.position == PositionEncoding::rotary),
      backend_(cfg.attention_backend),
      self_only_(options.attention_self_only),
      pad_fraction_(cfg.attention_pad_fraction),
      strided_v_(cfg.attention_noncontiguous_v),
      conv_kernel_(cfg.qkv_conv_kernel) {
  const int64_t c = cfg.hidden_size;
  const int64_t qkv_width = qkv_output_width(cfg);
  qkv = register_module("qkv", torch::nn::Linear(c, qkv_width));
  proj = register_module("proj", torch::nn::Linear(c, c));
  if (conv_kernel_ > 0) {
    // Primer's depthwise causal convolution on each Q/K/V channel. On ROCm a Conv1d goes
    // through MIOpen, so this knob puts MIOpen kernels (and their fusion/tuning choices)
    // inside every attention layer of the fusion stress mode.
    qkv_conv = register_module(
        "qkv_conv",
        torch::nn::Conv1d(torch::nn::Conv1dOptions(qkv_width, qkv_width, conv_kernel_).groups(qkv_width).bias(false)));
    // Start as the identity (weight 1 on the current position) so turning the knob on does
    // not change what the model computes at initialisation.
    torch::NoGradGuard no_grad;
    qkv_conv->weight.zero_();
    qkv_conv->weight.select(2, conv_kernel_ - 1).fill_(1.0);
  }
  if (cfg.qk_norm) {
    q_norm_ = register_module("q_norm", Norm(cfg.norm, head_dim_));
    k_norm_ = register_module("k_norm", Norm(cfg.norm, head_dim_));
  }
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& input) { return project(attend(heads(input))); }

AttentionInputs CausalSelfAttentionImpl::heads(const torch::Tensor& input) {
  const auto x = tp_.enter(input);  // tensor parallel: the whole sequence, on every rank of the group
  const int64_t batch = x.size(0), seq = x.size(1);
  auto qkv_out = tapped_linear(qkv, x, "attn.qkv");  // [B, T, C + 2 KV] (tensor parallel: this rank's heads' share)
  const int64_t width = num_heads_ * head_dim_;
  if (conv_kernel_ > 0) qkv_out = causal_conv(qkv_out);
  const int64_t kv_width = kv_heads_ * head_dim_;
  const auto parts = qkv_out.split_with_sizes({width, kv_width, kv_width}, -1);
  auto split_heads = [&](const torch::Tensor& t, int64_t count) {
    return t.reshape({batch, seq, count, head_dim_}).transpose(1, 2);  // [B, count, T, D]
  };
  auto q = split_heads(parts[0], num_heads_), k = split_heads(parts[1], kv_heads_),
       v = split_heads(parts[2], kv_heads_);
  if (!q_norm_.is_empty()) {
    q = q_norm_(q);
    k = k_norm_(k);
  }
  if (rotary_) {
    q = apply_rotary(q);
    k = apply_rotary(k);
  }
  // Grouped-query attention: each key/value head serves num_heads / kv_heads consecutive query
  // heads (Hugging Face's repeat_kv), so every attention backend sees as many K/V heads as Q.
  if (kv_heads_ < num_heads_) {
    k = repeat_key_value_heads(k, num_heads_ / kv_heads_);
    v = repeat_key_value_heads(v, num_heads_ / kv_heads_);
  }
  if (capture_) {
    *capture_ = {q.detach(), k.detach(), v.detach()};
    capture_ = nullptr;
  }
  return {q, k, v};
}

torch::Tensor CausalSelfAttentionImpl::attend(const AttentionInputs& in) {
  const int64_t batch = in.q.size(0), seq = in.q.size(2);
  const auto v = strided_v_ ? strided_view_of(in.v) : in.v;
  return attention_kernel(in.q, in.k, v).transpose(1, 2).reshape({batch, seq, num_heads_ * head_dim_});
}

torch::Tensor CausalSelfAttentionImpl::project(const torch::Tensor& attended) {
  return tp_.row_parallel_linear(attended, proj->weight, proj->bias, "attn.proj");
}

torch::Tensor CausalSelfAttentionImpl::causal_conv(const torch::Tensor& x) const {
  // Left padding only: position t sees t-k+1..t, never the future. The [B, T, C] activations are
  // already a channels-last image [B, C, 1, T] (a permuted view, no copy), so the depthwise conv
  // runs as a 2-D one on it and, where the backend keeps channels-last (MIOpen/cuDNN NHWC), its
  // output permuted back is [B, T, C] contiguous: the last-dimension stride 1 every fused SDPA
  // kernel needs (a stride of T sent them to the math path: on an H200 at seq 8192, a 24 GiB
  // float32 score gradient and an out-of-memory). A backend that answers channels-first gets the
  // copy `contiguous` makes.
  const auto padded = F::pad(x, F::PadFuncOptions({0, 0, conv_kernel_ - 1, 0}));  // [B, T + k - 1, C]
  const auto image = padded.unsqueeze(1).permute({0, 3, 1, 2});                    // [B, C, 1, T + k - 1]
  const auto out = gemm_depthwise_conv2d(image, qkv_conv->weight.unsqueeze(2));  // weight [C, 1, 1, k]
  return out.squeeze(2).permute({0, 2, 1}).contiguous();
}

void CausalSelfAttentionImpl::use_tensor_parallel(TensorParallelLink link, int degree) {
  num_heads_ /= degree;
  kv_heads_ /= degree;
  tp_ = std::move(link);
}

torch::Tensor CausalSelfAttentionImpl::allowed_keys(int64_t batch, int64_t seq, torch::Device device) const {
  const auto bools = torch::TensorOptions().dtype(torch::kBool).device(device);
  if (self_only_) return torch::eye(seq, bools);
  if (pad_fraction_ > 0.0) return padded_causal_mask(batch, seq, pad_fraction_, device);
  if (!calls_sdpa()) return torch::ones({seq, seq}, bools).tril();
  return {};
}

torch::Tensor CausalSelfAttentionImpl::allowed_keys(const torch::Tensor& q) const {
  const int64_t batch = q.size(0), seq = q.size(2);
  const bool fits = allowed_.defined() && allowed_.device() == q.device() && allowed_.size(-1) == seq &&
                    (allowed_.dim() < 4 || allowed_.size(0) == batch);
  return fits ? allowed_ : allowed_keys(batch, seq, q.device());
}

torch::Tensor CausalSelfAttentionImpl::attention_kernel(const torch::Tensor& q, const torch::Tensor& k,
                                                        const torch::Tensor& v) {
  const double dropout = is_training() ? dropout_ : 0.0;
  const auto allowed = allowed_keys(q);
  if (calls_sdpa()) return sdpa_attention(q, k, v, allowed, dropout);
  return explicit_attention(q, k, v, allowed, dropout, is_training());
}

std::string CausalSelfAttentionImpl::training_kernel(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v) const {
  if (!calls_sdpa()) return "explicit";
  return sdpa_kernel_choice(q, k, strided_v_ ? strided_view_of(v) : v, allowed_keys(q), dropout_);
}

}  // namespace rcl
