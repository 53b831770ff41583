// The decoder-only Transformer every stress mode trains: a GPT-style stack whose knobs
// (width, depth, norms, activation, layout, positions, attention backend, Q/K/V convolution,
// dropout, stochastic depth, activation checkpointing) come from TrainingConfig, so the
// stress modes reshape the GPU work by editing configuration only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/attention_kernels.hpp"
#include "rocm_conformance_llm/workload/fsdp.hpp"
#include "rocm_conformance_llm/workload/lm_head.hpp"
#include "rocm_conformance_llm/workload/model_flops.hpp"
#include "rocm_conformance_llm/workload/model_parallel.hpp"
#include "rocm_conformance_llm/workload/model_widths.hpp"
#include "rocm_conformance_llm/workload/moe.hpp"
#include "rocm_conformance_llm/workload/tensor_parallel.hpp"

namespace rcl {

// Switches for tests only: never reachable from the CLI or a config file.
struct ModelOptions {
  // Every position attends only to itself, so no information moves between tokens: the
  // copy segments of the synthetic corpus become unlearnable (proves the copy-task test
  // really measures attention).
  bool attention_self_only = false;
};

// Per-token cross entropy [B,T] in at least float32 (autocast leaves bf16/fp16 logits).
torch::Tensor token_losses(const torch::Tensor& logits, const torch::Tensor& targets);
// Mean of token_losses.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

// One layer's attention inputs, each [B, H, T, D] after QK-norm, rotary and the repeat of
// grouped-query attention's K/V heads (the attention parity probe's copy is detached).
struct AttentionInputs {
  torch::Tensor q, k, v;
};

// LayerNorm or RMSNorm over the last dimension.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(NormKind kind, int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  bool rms_;
  int64_t dim_;
  torch::Tensor weight_;
  torch::Tensor bias_;  // LayerNorm only
};
TORCH_MODULE(Norm);

// Defined in workload/attention.cpp (the kernels it calls: workload/attention_kernels.hpp).
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const TrainingConfig& cfg, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [B,T,C] -> [B,T,C]: project(attend(heads(x)))
  // The forward in three parts, so checkpointing can keep the kernel's tensors and recompute the
  // rest: Q, K, V [B, H, T, D] (QK-norm, rotary and the GQA repeat applied); the kernel's output,
  // heads merged [B, T, C]; the output projection.
  AttentionInputs heads(const torch::Tensor& x);
  torch::Tensor attend(const AttentionInputs& heads);
  torch::Tensor project(const torch::Tensor& attended);
  // The next forward stores its Q, K, V in `out` (the attention parity probe's inputs).
  void capture_next(AttentionInputs* out) { capture_ = out; }
  // The kernel a training call with these Q, K, V would run on (sdpa_kernel_choice, with this
  // layer's mask, dropout and V layout), or "explicit" where the layer does not call SDPA.
  std::string training_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) const;
  // The keys each query may attend to in a batch of this shape: the padding mask, the test-only
  // self mask, the explicit path's causal mask; undefined where SDPA's is_causal serves.
  torch::Tensor allowed_keys(int64_t batch, int64_t seq, torch::Device device) const;
  // The model builds that mask once per forward and hands it to every layer.
  void use_allowed_keys(torch::Tensor allowed) { allowed_ = std::move(allowed); }
  // qkv_conv's causal filter on the Q/K/V projection's output: [B, T, C] -> [B, T, C] contiguous.
  torch::Tensor causal_conv(const torch::Tensor& x) const;

  torch::nn::Linear qkv{nullptr};       // Q, K, V rows: hidden, then key_value_width twice
  torch::nn::Linear proj{nullptr};      // residual projection (scaled init)
  torch::nn::Conv1d qkv_conv{nullptr};  // qkv_conv_kernel > 0: one causal filter per Q/K/V channel

  // Tensor parallel (transport/parallelize.hpp): the weights above already hold this rank's
  // 1/degree of the heads; the forward then computes those heads and reduces through `link`.
  void use_tensor_parallel(TensorParallelLink link, int degree);

 private:
  torch::Tensor attention_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
  bool calls_sdpa() const { return backend_ != AttentionBackend::math && !self_only_; }
  torch::Tensor allowed_keys(const torch::Tensor& q) const;  // the handed mask where it fits q's batch

  int64_t num_heads_;
  int64_t kv_heads_;  // < num_heads_: grouped-query attention
  int64_t head_dim_;
  double dropout_;
  bool rotary_;
  AttentionBackend backend_;
  bool self_only_;
  double pad_fraction_;
  bool strided_v_;
  AttentionInputs* capture_ = nullptr;
  torch::Tensor allowed_;  // the forward's mask (use_allowed_keys)
  TensorParallelLink tp_;  // inactive unless split
  int64_t conv_kernel_;
  Norm q_norm_{nullptr};
  Norm k_norm_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const TrainingConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear up{nullptr};    // SwiGLU: gate and up projections fused in one GEMM
  torch::nn::Linear down{nullptr};  // residual projection (scaled init)

  // Tensor parallel (transport/parallelize.hpp): up and down already hold this rank's columns of
  // the hidden layer; the forward reduces the partial outputs through `link`.
  void use_tensor_parallel(TensorParallelLink link) { tp_ = std::move(link); }

 private:
  bool swiglu_;
  TensorParallelLink tp_;  // inactive unless split
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  // `index` is 0-based; the stochastic-depth rate grows linearly to cfg.drop_path at the
  // last block: drop_path * (index + 1) / num_layers.
  BlockImpl(const TrainingConfig& cfg, int64_t index, const ModelOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // after_attention(x, attention(attention_inputs(x)))
  // The three parts of forward, for checkpointing that keeps the attention kernel's tensors.
  AttentionInputs attention_inputs(const torch::Tensor& x);
  torch::Tensor attention(const AttentionInputs& heads);
  torch::Tensor after_attention(const torch::Tensor& x, const torch::Tensor& attended);

  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};             // dense feed-forward (moe_experts == 0)
  MoeFeedForward moe{nullptr};  // mixture of experts (moe_experts > 0) in its place

 private:
  torch::Tensor residual_branch(const torch::Tensor& branch_out);

  Norm norm_attn_{nullptr};
  Norm norm_mlp_{nullptr};
  Norm post_norm_attn_{nullptr};  // sandwich layout only
  Norm post_norm_mlp_{nullptr};
  int64_t index_;
  double dropout_;
  double drop_path_;
};
TORCH_MODULE(Block);

class GPTImpl : public torch::nn::Module {
 public:
  // cfg.vocab_size must be resolved (> 0). A non-math attention backend on libtorch < 2.0 is
  // a ConfigError. Sets the process-global SDPA switches to cfg.attention_backend.
  explicit GPTImpl(const TrainingConfig& cfg, ModelOptions options = {});

  // tokens [B,T] int64 -> logits [B,T,vocab]. With `block_outputs`, the hidden state after
  // the embedding and after each block is appended (size num_layers + 1), so a detector can
  // name the first block whose output turned non-finite.
  // The head runs over padded_vocab(vocab) rows (lm_head.hpp); the pad columns are cut off.
  torch::Tensor forward(const torch::Tensor& tokens, std::vector<torch::Tensor>* block_outputs = nullptr);
  // Mean cross-entropy against the next tokens `targets` [B,T] without the whole batch's logits
  // (chunked_lm_loss); `on_logits` hears each chunk's logits. `block_outputs` as in forward.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets, const LogitsHook& on_logits = {},
                     std::vector<torch::Tensor>* block_outputs = nullptr);

  // AdamW groups: weight decay applies to the Linear weight matrices only (not to norms,
  // biases, embeddings, nor the identity-initialised Q/K/V convolution).
  std::vector<torch::Tensor> decay_parameters() { return parameters_with_decay(true); }
  std::vector<torch::Tensor> no_decay_parameters() { return parameters_with_decay(false); }

  const TrainingConfig& config() const { return cfg_; }
  std::vector<Block>& blocks() { return blocks_; }

  // The parallel layouts (transport/parallelize.hpp) transform a built model through these two
  // seams: the groups its forward splits the sequence over (tensor and expert parallel), and the
  // units that gather each block's parameters around its forward (fully sharded data parallel).
  void set_parallel(ModelParallel parallel) { parallel_ = std::move(parallel); }
  const ModelParallel& parallel() const { return parallel_; }
  void set_fully_sharded(std::shared_ptr<FsdpModel> fsdp) { fsdp_ = std::move(fsdp); }
  FsdpModel* fsdp() const { return fsdp_.get(); }

 private:
  std::vector<torch::Tensor> parameters_with_decay(bool decayed);
  // Embedding, blocks and final norm: the LM head's input [B,T,C] (FSDP's root stays gathered).
  torch::Tensor final_hidden(const torch::Tensor& tokens, std::vector<torch::Tensor>* block_outputs);

  TrainingConfig cfg_;
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};  // learned positions only
  std::vector<Block> blocks_;
  Norm final_norm_{nullptr};
  ModelParallel parallel_;
  std::shared_ptr<FsdpModel> fsdp_;
};
TORCH_MODULE(GPT);

}  // namespace rcl
