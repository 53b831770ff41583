// Mixture-of-experts feed-forward with expert parallelism (Megatron's `_AllToAll` token
// dispatcher, torchtitan's expert_parallel.py): a top-k softmax router, experts sharded across
// the expert-parallel group, tokens sent to their experts' ranks by an all-to-all of the
// per-expert counts then an uneven all-to-all of the tokens, and brought back by the all-to-all
// with the splits swapped. Uneven splits every step are what RCCL's alltoallv path sees in real
// MoE training (its hangs: ROCm/rccl-tests #90, legacy-rocm-build #2554).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/model_parallel.hpp"

namespace rcl {

class MoeFeedForwardImpl : public torch::nn::Module {
 public:
  // cfg.moe_experts experts, each the dense MLP's shape (ffn_hidden_size, cfg.activation).
  explicit MoeFeedForwardImpl(const TrainingConfig& cfg);
  // x [B, T, C] -> [B, T, C]: each token the renormalised top-k router weights times its
  // experts' outputs.
  torch::Tensor forward(const torch::Tensor& x);
  // Keeps this rank's experts (group rank r of n: experts [r E/n, (r+1) E/n)) of the full,
  // seeded ones. Without a group (or one of one) every expert stays local and no all-to-all runs.
  //
  // Gradients: an expert's gradient on its rank sums every group member's tokens' contributions,
  // where a data-parallel replica holding every expert would have only its own tokens': divide
  // expert gradients by the group size (expert_parameters) before averaging them over the
  // replicas that hold the same experts.
  void shard(std::shared_ptr<ModelParallelGroup> experts);
  std::vector<torch::Tensor> expert_parameters() { return {w_up, b_up, w_down, b_down}; }
  // Tokens (token-expert pairs) this rank routed to each expert in the last forward [E].
  const torch::Tensor& last_tokens_per_expert() const { return last_counts_; }

  torch::nn::Linear router{nullptr};  // C -> E, no bias
  // Experts stacked on dim 0 (this rank's, once sharded): up [E, up_width, C], down [E, C, ffn].
  torch::Tensor w_up, b_up, w_down, b_down;

 private:
  torch::Tensor experts_forward(const torch::Tensor& rows, const torch::Tensor& rows_per_expert);

  int64_t experts_;
  int64_t top_k_;
  bool swiglu_;
  std::shared_ptr<ModelParallelGroup> group_;
  torch::Tensor last_counts_;
};
TORCH_MODULE(MoeFeedForward);

}  // namespace rcl
