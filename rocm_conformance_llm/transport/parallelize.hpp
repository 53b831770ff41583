// The parallel layouts as transformations of a built model, applied once before the loop (as
// torchtitan's parallelize_* functions are): tensor parallel keeps each rank's heads and MLP
// columns, expert parallel each rank's experts, fully sharded data parallel cuts every block and
// the root into per-rank shards. The model itself is one class (model.hpp); what a layout changes
// goes through its seams (the modules' public weights, use_tensor_parallel, GPT::set_parallel,
// GPT::set_fully_sharded). The GradientSync that runs the layout's collectives in the step picks
// which of these apply (GradientSync::parallelize).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/workload/fsdp.hpp"
#include "rocm_conformance_llm/workload/model_parallel.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

// What a layout leaves for the optimizer to train: its two AdamW groups, which shard of the flat
// buffer this rank updates, the parameters it holds alone, and each parameter's weight in the
// global gradient norm.
struct ParallelizedModel {
  std::vector<torch::Tensor> decayed;
  std::vector<torch::Tensor> plain;
  ShardOf optimizer_shard{};
  std::vector<torch::Tensor> experts{};  // this rank's own experts: no data-parallel replicas
  // Given the optimizer's parameters (FlatAdamW::parameters order), the weight of each in the
  // squared gradient norm summed over the ranks; unset where the plain norm is the global one.
  std::function<std::vector<double>(const std::vector<torch::Tensor>&)> norm_weights{};

  // The optimizer over these parameters, its norm weighed.
  std::unique_ptr<FlatAdamW> make_optimizer(AdamWHyper hyper) const;
};

// The optimizer's parameters: the model's AdamW groups (GPT::decay_parameters), or, once fully
// sharded, this rank's shards of every unit (FsdpModel::decayed_shards).
ParallelizedModel optimizer_parameters(GPT& model);

// Tensor parallel (Megatron's layout) over parallel.tensor: attention Q/K/V column-parallel by
// heads and the output projection row-parallel; MLP up (gate and up for SwiGLU) column-parallel,
// down row-parallel. Each rank keeps its slice of the full weights the seeded init drew, so the
// split model computes what the whole one does (tests/unit/test_tensor_parallel.cpp).
void parallelize_tensor(GPT& model, const ModelParallel& parallel);
// Expert parallel: each mixture-of-experts layer keeps its rank's experts (workload/moe.hpp);
// without a group every expert stays.
void parallelize_experts(GPT& model, const std::shared_ptr<ModelParallelGroup>& experts);
// Both, over `parallel`'s groups (call before the parameters reach the device and the optimizer);
// returns the parameters the split made rank-specific or partial.
SplitParameters parallelize_split(GPT& model, ModelParallel parallel);

// Fully sharded data parallel (workload/fsdp.hpp): one unit per block and one for the root, cut
// from the model on its device; its forward then gathers each where it is used. Call once, before
// the optimizer takes the parameters (optimizer_parameters then gives it the shards).
FsdpModel& fully_shard(GPT& model, std::shared_ptr<ShardGroup> group);

// Every parameter the tensor and expert split made rank-specific or partial; all empty when
// nothing is split. Gradient averaging, the global gradient norm, the cross-rank parameter checks
// and the checkpoints treat each kind its own way.
SplitParameters split_parameters(GPT& model);
// The whole model's parameters, by name, the tensor-parallel slices gathered over the tensor
// group and the experts over the expert group (collectives: every rank of the world calls it).
// The parameters themselves when not split.
std::vector<std::pair<std::string, torch::Tensor>> gather_full_parameters(GPT& model);

}  // namespace rcl
