#include "rocm_conformance_llm/model.hpp"

#include <cmath>
#include <limits>

#include <torch/version.h>

#include "rocm_conformance_llm/workload/checkpointing.hpp"
#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

// at::scaled_dot_product_attention and its backend switches are public from libtorch 2.0;
// on 1.13 the explicit "math" path is the only attention.
#if TORCH_VERSION_MAJOR >= 2
#define RCL_HAVE_SDPA 1
#endif

namespace rcl {
namespace F = torch::nn::functional;
namespace {

constexpr double kNormEps = 1e-5;

// float64 stays float64 (gradient checks); bf16/fp16 compute in float32.
c10::ScalarType at_least_float(c10::ScalarType t) { return at::promote_types(t, torch::kFloat); }

int64_t norm_params(NormKind kind, int64_t dim) { return kind == NormKind::rmsnorm ? dim : 2 * dim; }

void init_linear(torch::nn::Linear& layer, double std) {
  torch::NoGradGuard no_grad;
  layer->weight.normal_(0.0, std);
  if (layer->bias.defined()) layer->bias.zero_();
}

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

// Restricting SDPA to one kernel family pins which GPU implementation (AOTriton/CK flash or
// memory-efficient on ROCm, or the math fallback) the run validates; plain "sdpa" lets libtorch
// choose among all of them.
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

// A model is built on the host and moved by its caller: `auto` left in a config built by hand
// resolves as on the CPU, to the explicit path GPT always ran before `auto`. Trainer and a run
// resolve it for their device before they build one.
TrainingConfig built_on_the_host(TrainingConfig cfg) {
  cfg.attention_backend =
      resolve_attention_backend(cfg.attention_backend, Capabilities::of_this_build(/*gpu=*/false));
  return cfg;
}

}  // namespace

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
  auto scores = tapped_matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
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

namespace {
// One MLP (or one expert): up (doubled for SwiGLU's gate) and down, with biases.
int64_t mlp_parameters(const TrainingConfig& cfg) {
  const int64_t c = cfg.hidden_size, ffn = ffn_hidden_size(cfg);
  const int64_t up_width = cfg.activation == Activation::swiglu ? 2 * ffn : ffn;
  return c * up_width + up_width + ffn * c + c;
}
}  // namespace

int64_t parameter_count(const TrainingConfig& cfg) {
  const int64_t c = cfg.hidden_size;
  const int64_t head_dim = c / cfg.num_heads;
  const int64_t qkv_width = qkv_output_width(cfg);
  int64_t block = 0;
  block += (cfg.norm_layout == NormLayout::sandwich ? 4 : 2) * norm_params(cfg.norm, c);
  block += c * qkv_width + qkv_width;        // qkv (K and V narrower under GQA)
  block += qkv_width * cfg.qkv_conv_kernel;  // depthwise conv, no bias
  if (cfg.qk_norm) block += 2 * norm_params(cfg.norm, head_dim);
  block += c * c + c;  // attention output projection
  const int64_t mlp = mlp_parameters(cfg);
  block += cfg.moe_experts > 0 ? cfg.moe_experts * (mlp + c) : mlp;  // MLP, or the experts and their router
  int64_t total = cfg.vocab_size * c + cfg.num_layers * block + norm_params(cfg.norm, c);
  if (cfg.position == PositionEncoding::learned) total += cfg.seq_len * c;
  return total;
}

int64_t gemm_parameter_count(const TrainingConfig& cfg) {
  return parameter_count(cfg) - (cfg.position == PositionEncoding::learned ? cfg.seq_len * cfg.hidden_size : 0);
}

// The GEMM parameters one token multiplies by: a mixture of experts routes it through moe_top_k
// of its experts (and the whole router), not all of them.
double active_gemm_parameters(const TrainingConfig& cfg) {
  double active = double(gemm_parameter_count(cfg));
  if (cfg.moe_experts > 0)
    active -= double(cfg.num_layers) * double(cfg.moe_experts - std::min(cfg.moe_top_k, cfg.moe_experts)) *
              double(mlp_parameters(cfg));
  return active;
}

double flops_per_token(const TrainingConfig& cfg) {
  return 6.0 * active_gemm_parameters(cfg) +
         12.0 * double(cfg.num_layers) * double(cfg.hidden_size) * double(cfg.seq_len);
}

double causal_flops_per_token(const TrainingConfig& cfg) {
  return 6.0 * active_gemm_parameters(cfg) +
         6.0 * double(cfg.num_layers) * double(cfg.hidden_size) * double(cfg.seq_len + 1);
}

torch::Tensor token_losses(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto vocab = logits.size(-1);
  const auto flat = logits.reshape({-1, vocab}).to(at_least_float(logits.scalar_type()));
  return F::cross_entropy(flat, targets.reshape({-1}), F::CrossEntropyFuncOptions().reduction(torch::kNone))
      .view(targets.sizes());
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return token_losses(logits, targets).mean();
}

// --- Norm ---

NormImpl::NormImpl(NormKind kind, int64_t dim) : rms_(kind == NormKind::rmsnorm), dim_(dim) {
  weight_ = register_parameter("weight", torch::ones({dim}));
  if (!rms_) bias_ = register_parameter("bias", torch::zeros({dim}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  // In x's dtype, statistics accumulated in >= float32, no float32 copy of x: a bf16/fp16 input (a
  // GEMM output under autocast: QK-norm and sandwich norms) meets its weights cast to bf16/fp16.
  // Autocast, off here, would run layer_norm in float32 and the model cast it back.
  const AutocastGuard no_autocast(x.device().type(), AutocastState{.enabled = false});
  const auto dtype = x.scalar_type();
  if (!rms_) {
    // libtorch 1.13's CPU layer_norm sums a bf16 input in bf16: 2.4x the error of float32 then
    // rounding (2.x: equal), which the shadow check rightly flags. There it runs in float32.
    if (TORCH_VERSION_MAJOR < 2 && x.is_cpu() && at_least_float(dtype) != dtype)
      return tapped_layer_norm(x.to(torch::kFloat), weight_, bias_, kNormEps).to(dtype);
    return tapped_layer_norm(x, weight_.to(dtype), bias_.to(dtype), kNormEps);
  }
  // RMSNorm has no fused op in libtorch 1.13: the mean square summed in >= float32.
  const auto mean_square = x.square().mean(-1, /*keepdim=*/true, at_least_float(dtype));
  return x * torch::rsqrt(mean_square + kNormEps).to(dtype) * weight_.to(dtype);
}

// --- attention ---

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

// --- MLP ---

MlpImpl::MlpImpl(const TrainingConfig& cfg) : swiglu_(cfg.activation == Activation::swiglu) {
  const int64_t ffn = ffn_hidden_size(cfg);
  up = register_module("up", torch::nn::Linear(cfg.hidden_size, swiglu_ ? 2 * ffn : ffn));
  down = register_module("down", torch::nn::Linear(ffn, cfg.hidden_size));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  const auto h = tapped_linear(up, tp_.enter(x), "mlp.up");
  if (!swiglu_) return tp_.row_parallel_linear(torch::gelu(h), down->weight, down->bias, "mlp.down");
  const auto gate_value = h.chunk(2, -1);
  return tp_.row_parallel_linear(torch::silu(gate_value[0]) * gate_value[1], down->weight, down->bias, "mlp.down");
}

// --- block ---

BlockImpl::BlockImpl(const TrainingConfig& cfg, int64_t index, const ModelOptions& options)
    : index_(index), dropout_(cfg.dropout), drop_path_(cfg.drop_path * double(index + 1) / double(cfg.num_layers)) {
  norm_attn_ = register_module("norm_attn", Norm(cfg.norm, cfg.hidden_size));
  attn = register_module("attn", CausalSelfAttention(cfg, options));
  norm_mlp_ = register_module("norm_mlp", Norm(cfg.norm, cfg.hidden_size));
  if (cfg.moe_experts > 0) moe = register_module("moe", MoeFeedForward(cfg));
  else mlp = register_module("mlp", Mlp(cfg));
  if (cfg.norm_layout == NormLayout::sandwich) {
    post_norm_attn_ = register_module("post_norm_attn", Norm(cfg.norm, cfg.hidden_size));
    post_norm_mlp_ = register_module("post_norm_mlp", Norm(cfg.norm, cfg.hidden_size));
  }
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) { return after_attention(x, attention(attention_inputs(x))); }

// Each part names the block's GEMMs itself: checkpointing recomputes the parts one by one.
AttentionInputs BlockImpl::attention_inputs(const torch::Tensor& x) {
  const GemmLayerScope layer(index_);
  return attn->heads(norm_attn_(x));
}

torch::Tensor BlockImpl::attention(const AttentionInputs& heads) {
  const GemmLayerScope layer(index_);
  return attn->attend(heads);
}

torch::Tensor BlockImpl::after_attention(const torch::Tensor& x, const torch::Tensor& attended) {
  const GemmLayerScope layer(index_);
  auto a = attn->project(attended);
  if (!post_norm_attn_.is_empty()) a = post_norm_attn_(a);
  const auto h = x + residual_branch(a);
  auto m = moe.is_empty() ? mlp(norm_mlp_(h)) : moe(norm_mlp_(h));
  if (!post_norm_mlp_.is_empty()) m = post_norm_mlp_(m);
  return h + residual_branch(m);
}

torch::Tensor BlockImpl::residual_branch(const torch::Tensor& branch_out) {
  auto out = torch::dropout(branch_out, dropout_, is_training());
  if (!is_training() || drop_path_ == 0.0) return out;
  // Stochastic depth: drop the whole branch for a sample, rescale the survivors.
  const auto keep = torch::empty({out.size(0), 1, 1}, out.options().dtype(at_least_float(out.scalar_type())))
                        .bernoulli_(1.0 - drop_path_)
                        .div_(1.0 - drop_path_);
  return out * keep.to(out.scalar_type());
}

// --- GPT ---

namespace {
// Selective activation checkpointing: the attention kernel runs once and autograd keeps what its
// backward reads (Q, K, V, the output and, on a fused kernel, its log-sum-exp; on the math path
// the probabilities, their dropout and the mask: docs/sizing.md), since recomputing it is most of
// a block's forward at long sequences. Backward recomputes the cheap rest from the block input:
// the norm and Q/K/V projection before the kernel, the output projection, residual dropout and
// MLP after it, each part under its own forward's RNG state (checkpoint_tensors), so every
// dropout mask is the forward's.
torch::Tensor forward_keeping_attention(Block block, const torch::Tensor& x) {
  const auto heads = checkpoint_tensors(
      [block](const std::vector<torch::Tensor>& in) mutable {
        const AttentionInputs h = block->attention_inputs(in[0]);
        return std::vector{h.q, h.k, h.v};
      },
      {x});
  const auto attended = block->attention({heads[0], heads[1], heads[2]});
  return checkpoint_tensors(
             [block](const std::vector<torch::Tensor>& in) mutable {
               return std::vector{block->after_attention(in[0], in[1])};
             },
             {x, attended})
      .front();
}
}  // namespace

GPTImpl::GPTImpl(const TrainingConfig& cfg, ModelOptions options) : cfg_(built_on_the_host(cfg)) {
  if (cfg.vocab_size <= 0) throw ConfigError("model: vocab_size must be resolved (> 0) before building the model");
  select_sdpa_backend(cfg_.attention_backend);
  wte_ = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
  if (cfg.position == PositionEncoding::learned)
    wpe_ = register_module("wpe", torch::nn::Embedding(cfg.seq_len, cfg.hidden_size));
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    blocks_.push_back(register_module("block" + std::to_string(i), Block(cfg_, i, options)));
  final_norm_ = register_module("final_norm", Norm(cfg.norm, cfg.hidden_size));

  // GPT-2 initialisation (N(0, init_std), 0.02 unless the gemm mode widened the model); the
  // projections that write into the residual stream are scaled by 1/sqrt(2L) so the residual's
  // variance does not grow with depth.
  const double residual_std = cfg.init_std / std::sqrt(2.0 * double(cfg.num_layers));
  torch::NoGradGuard no_grad;
  wte_->weight.normal_(0.0, cfg.init_std);
  if (!wpe_.is_empty()) wpe_->weight.normal_(0.0, cfg.init_std);
  for (auto& block : blocks_) {
    init_linear(block->attn->qkv, cfg.init_std);
    init_linear(block->attn->proj, residual_std);
    if (block->mlp.is_empty()) continue;  // experts draw their own (workload/moe.cpp)
    init_linear(block->mlp->up, cfg.init_std);
    init_linear(block->mlp->down, residual_std);
  }
}

torch::Tensor GPTImpl::final_hidden(const torch::Tensor& tokens, std::vector<torch::Tensor>* block_outputs) {
  const int64_t seq = tokens.size(1);
  TORCH_CHECK(wpe_.is_empty() || seq <= cfg_.seq_len, "sequence of ", seq,
              " tokens is longer than the learned position table (seq_len=", cfg_.seq_len, ")");
  if (fsdp_) fsdp_->begin_forward();
  auto x = wte_(tokens);
  if (!wpe_.is_empty()) x = x + wpe_(torch::arange(seq, tokens.options()));
  x = torch::dropout(x, cfg_.dropout, is_training());
  if (parallel_.sequence_parallel) x = split_sequence(x, *parallel_.tensor, "embedding.out");
  if (block_outputs) block_outputs->push_back(x);

  // One mask for every layer (all share the config), not one per layer.
  if (!blocks_.empty()) {
    const auto allowed = blocks_.front()->attn->allowed_keys(tokens.size(0), seq, tokens.device());
    for (auto& block : blocks_) block->attn->use_allowed_keys(allowed);
  }
  // FSDP recomputes every block in its backward already: activation checkpointing is implied.
  const bool recompute = cfg_.activation_checkpointing && is_training() && torch::GradMode::is_enabled();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    auto& block = blocks_[i];
    if (fsdp_) x = fsdp_->block_forward(int64_t(i), x);
    else if (!recompute) x = block->forward(x);
    else if (cfg_.checkpoint_keep_attention) x = forward_keeping_attention(block, x);
    else x = checkpoint([block](const torch::Tensor& in) mutable { return block->forward(in); }, x);
    if (block_outputs) block_outputs->push_back(x);
  }
  x = final_norm_(x);
  if (parallel_.sequence_parallel) x = gather_sequence_for_replicated(x, *parallel_.tensor, "lm_head.in");
  return x;
}

torch::Tensor GPTImpl::forward(const torch::Tensor& tokens, std::vector<torch::Tensor>* block_outputs) {
  const auto x = final_hidden(tokens, block_outputs);
  // LM head tied to the token embedding.
  auto logits = tapped_linear(x, padded_head_weight(wte_->weight), {}, "lm_head").narrow(-1, 0, cfg_.vocab_size);
  if (fsdp_) fsdp_->end_forward();
  return logits;
}

torch::Tensor GPTImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets, const LogitsHook& on_logits,
                            std::vector<torch::Tensor>* block_outputs) {
  const auto x = final_hidden(tokens, block_outputs);
  auto loss = chunked_lm_loss(x.reshape({-1, x.size(-1)}), wte_->weight, targets.reshape({-1}), on_logits);
  if (fsdp_) fsdp_->end_forward();
  return loss;
}

std::vector<torch::Tensor> GPTImpl::parameters_with_decay(bool decayed) {
  std::vector<torch::Tensor> out;
  for (const auto& item : named_parameters()) {
    const bool embedding = item.key().rfind("wte.", 0) == 0 || item.key().rfind("wpe.", 0) == 0;
    if ((item.value().dim() == 2 && !embedding) == decayed) out.push_back(item.value());
  }
  return out;
}

}  // namespace rcl
