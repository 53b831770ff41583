// Megatron-style tensor parallelism (megatron/core/tensor_parallel/mappings.py) as autograd
// functions over a ModelParallelGroup, and the slicing that gives each rank its shard of the
// full, seeded initial weights (so a tensor-parallel run starts where the unsplit one does).
//
// Column-parallel linear: its input enters through `enter_region` (identity forward, all-reduce
// of the input gradient backward); row-parallel linear: its partial output leaves through
// `leave_region` (all-reduce forward, identity backward). With sequence parallelism the
// activations between them are split along the sequence (dim 1 of [B, T, C]): entering is an
// all-gather forward / reduce-scatter backward, leaving a reduce-scatter forward / all-gather
// backward.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/workload/model_parallel.hpp"

namespace rcl {

// f: identity forward, all-reduce backward (`op` names the collective in the record).
torch::Tensor copy_to_parallel_region(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op);
// g: all-reduce forward, identity backward.
torch::Tensor reduce_from_parallel_region(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op);
// Sequence parallel, on dim 1 of [B, T, C]: all-gather forward / reduce-scatter backward.
torch::Tensor gather_sequence(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op);
// Sequence parallel: reduce-scatter forward / all-gather backward.
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op);
// This rank's slice of the sequence forward / all-gather backward (the embedding's output enters
// the sequence-parallel region).
torch::Tensor split_sequence(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op);
// The whole sequence forward / this rank's slice of the gradient backward (the replicated LM
// head's input leaves the region: every rank's gradient of it is the same).
torch::Tensor gather_sequence_for_replicated(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op);
// all_to_all_single along dim 0 (MoE dispatch and combine): backward is the all-to-all with the
// splits swapped.
torch::Tensor all_to_all_rows(const torch::Tensor& x, ModelParallelGroup& group, const std::vector<int64_t>& in_splits,
                              const std::vector<int64_t>& out_splits, const std::string& op);

// The two ends of a tensor-parallel pair, as one block uses them: a no-op without a group.
class TensorParallelLink {
 public:
  TensorParallelLink() = default;
  TensorParallelLink(std::shared_ptr<ModelParallelGroup> group, bool sequence_parallel, std::string name)
      : group_(std::move(group)), sequence_parallel_(sequence_parallel), name_(std::move(name)) {}

  bool active() const { return group_ != nullptr; }
  // Before a column-parallel linear.
  torch::Tensor enter(const torch::Tensor& x) const;
  // A row-parallel linear without its bias, the partial sums reduced, then the bias (added once);
  // without a group, the plain linear.
  torch::Tensor row_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                    const char* site) const;

 private:
  std::shared_ptr<ModelParallelGroup> group_;
  bool sequence_parallel_ = false;
  std::string name_;
};

// --- shards of the full weights -------------------------------------------------------------
// Rows [rank * n / degree, (rank + 1) * n / degree) of each consecutive row block of `full`, n
// rows each as `block_rows` lists them (e.g. Q, K, V of a fused QKV weight, K and V narrower
// under grouped-query attention; gate and up of SwiGLU), concatenated: a column-parallel
// weight's (or bias's) shard.
torch::Tensor column_shard(const torch::Tensor& full, const std::vector<int64_t>& block_rows, int rank, int degree);
// Columns (dim 1) of `full` split the same way: a row-parallel weight's shard.
torch::Tensor row_shard(const torch::Tensor& full, int rank, int degree);
// Replaces `param`'s values by `shard` (a new shape), keeping the same parameter object.
void assign_shard(torch::Tensor& param, const torch::Tensor& shard);

// Gradients of parameters replicated across the tensor-parallel group that saw only this rank's
// slice of the sequence (sequence parallel: the norms, the row-parallel biases): summed over the
// group in one flat all-reduce so every member holds the full gradient.
void all_reduce_replicated_gradients(const std::vector<torch::Tensor>& params, ModelParallelGroup& group);

}  // namespace rcl
