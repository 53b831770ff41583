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
  // Keeps and computes only this rank's experts (group rank r of n: experts [r E/n, (r+1) E/n)),
  // the others' tokens reaching them by the all-to-alls: w_up and the rest become [E/n, ...],
  // sliced from the whole init every rank drew, so the split layer computes the unsplit one. An
  // expert's gradient on its rank sums every group member's tokens' contributions; the ranks that
  // hold the same experts (one per expert group) then average them (transport/split_model.hpp):
  // these parameters are no data-parallel replicas. Without a group (or one of one) every expert
  // is kept and computed locally and no all-to-all runs.
  void shard(std::shared_ptr<ModelParallelGroup> experts);
  std::vector<torch::Tensor> expert_parameters() { return {w_up, b_up, w_down, b_down}; }
  // The whole layer's expert parameters by their names here ("w_up", ...): this rank's gathered
  // with the group's, in expert order (a collective over the group); this rank's when unsplit.
  std::vector<std::pair<std::string, torch::Tensor>> gather_experts(const std::string& where);
  int64_t local_experts() const { return w_up.size(0); }
  // Tokens (token-expert pairs) this rank routed to each expert in the last forward [E].
  const torch::Tensor& last_tokens_per_expert() const { return last_counts_; }

  torch::nn::Linear router{nullptr};  // C -> E, no bias
  // This rank's experts stacked on dim 0: up [E_local, up_width, C], down [E_local, C, ffn].
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
