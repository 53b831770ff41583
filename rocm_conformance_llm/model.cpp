#include "rocm_conformance_llm/model.hpp"

#include <cmath>

#include <torch/version.h>

#include "rocm_conformance_llm/workload/checkpointing.hpp"
#include "rocm_conformance_llm/workload/compute_dtype.hpp"
#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace F = torch::nn::functional;
namespace {

constexpr double kNormEps = 1e-5;

void init_linear(torch::nn::Linear& layer, double std) {
  torch::NoGradGuard no_grad;
  layer->weight.normal_(0.0, std);
  if (layer->bias.defined()) layer->bias.zero_();
}

}  // namespace

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

GPTImpl::GPTImpl(const TrainingConfig& cfg, ModelOptions options) : cfg_(cfg) {
  require_resolved(cfg.attention_backend, "the model");
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
