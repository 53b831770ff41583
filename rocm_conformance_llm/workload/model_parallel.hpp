// The collectives a model-parallel layer issues (tensor parallel, sequence parallel, expert
// parallel), as an interface: the model (workload layer) calls it, the transport layer implements
// it over a c10d subgroup (transport/subgroups.hpp) and records each collective it runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace rcl {

class ModelParallelGroup {
 public:
  virtual ~ModelParallelGroup() = default;
  virtual int rank() const = 0;  // this rank's index in the group
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "tp", "dp", "ep": how reports name the group
  // In place, SUM over the group.
  virtual void all_reduce_sum(torch::Tensor& tensor, const std::string& op) = 0;
  // Every member's `in` (same shape everywhere) concatenated along dim 0, in group-rank order.
  virtual torch::Tensor all_gather_rows(const torch::Tensor& in, const std::string& op) = 0;
  // `in` holds size() equal chunks along dim 0; returns the SUM over members of chunk rank().
  virtual torch::Tensor reduce_scatter_rows(const torch::Tensor& in, const std::string& op) = 0;
  // all_to_all_single along dim 0: in_splits[r] rows go to member r, out_splits[r] come from it.
  virtual torch::Tensor all_to_all_rows(const torch::Tensor& in, const std::vector<int64_t>& in_splits,
                                        const std::vector<int64_t>& out_splits, const std::string& op) = 0;
};

// How the model is split across ranks. Empty groups: nothing split (a world of one, or degree 1).
struct ModelParallel {
  std::shared_ptr<ModelParallelGroup> tensor;  // tensor-parallel group (consecutive ranks)
  bool sequence_parallel = false;              // activations between blocks split along the sequence
  std::shared_ptr<ModelParallelGroup> expert;  // expert-parallel group (the data-parallel ranks)

  int tensor_degree() const { return tensor ? tensor->size() : 1; }
  int tensor_rank() const { return tensor ? tensor->rank() : 0; }
  bool splits_model() const { return tensor != nullptr || expert != nullptr; }
};

// A split model's parameters by how their values and gradients differ across ranks; every
// parameter not listed is replicated on every rank (equal values, whole gradients after the
// data-parallel average).
struct SplitParameters {
  std::vector<torch::Tensor> partial;       // replicated over the tensor-parallel group, each rank's gradient a share
  std::vector<torch::Tensor> tensor_split;  // each tensor-parallel rank its own slice
  // Each expert-parallel rank its own experts (workload/moe.hpp): no data-parallel replicas, so
  // outside the data-parallel average and ZeRO's shards; averaged over the ranks holding the
  // same experts instead. May also be `partial` (sequence parallel).
  std::vector<torch::Tensor> experts;
};

}  // namespace rcl
