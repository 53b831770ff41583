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
  // Computes only this rank's experts (group rank r of n: experts [r E/n, (r+1) E/n)), the
  // others' tokens reaching them by the all-to-alls. Every rank keeps every expert's weights,
  // equal across ranks: an expert's gradient is non-zero only on the ranks computing it, where it
  // sums every group member's tokens' contributions, so the data-parallel average (DDP's
  // all-reduce or ZeRO's reduce-scatter, over n' >= n ranks) gives each expert the mean over all
  // tokens the unsplit replicas would, with no rule of its own. Without a group (or one of one)
  // every expert is computed locally and no all-to-all runs.
  void shard(std::shared_ptr<ModelParallelGroup> experts);
  std::vector<torch::Tensor> expert_parameters() { return {w_up, b_up, w_down, b_down}; }
  // Tokens (token-expert pairs) this rank routed to each expert in the last forward [E].
  const torch::Tensor& last_tokens_per_expert() const { return last_counts_; }

  torch::nn::Linear router{nullptr};  // C -> E, no bias
  // Experts stacked on dim 0: up [E, up_width, C], down [E, C, ffn].
  torch::Tensor w_up, b_up, w_down, b_down;

 private:
  torch::Tensor experts_forward(const torch::Tensor& rows, const torch::Tensor& rows_per_expert);

  int64_t experts_;
  int64_t top_k_;
  bool swiglu_;
  std::shared_ptr<ModelParallelGroup> group_;
  int64_t first_expert_ = 0;  // the first expert this rank computes
  torch::Tensor last_counts_;
};
TORCH_MODULE(MoeFeedForward);

}  // namespace rcl
