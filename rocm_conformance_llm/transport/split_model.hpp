// What data-parallel training owes a model split across ranks (tensor parallel; experts
// computed over the expert-parallel group), beside its DDP or ZeRO averaging over the
// data-parallel group: the partial gradients, the global gradient norm, and which ranks must hold
// equal values (docs/distributed.md, "Tensor and expert parallelism").
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/subgroups.hpp"
#include "rocm_conformance_llm/workload/model_parallel.hpp"

namespace rcl {

// A parameter's kind for the cross-rank parameter check: who must hold the same values.
enum class ParameterKind { replicated, tensor_split, expert };
inline constexpr std::array<ParameterKind, 3> kParameterKinds{ParameterKind::replicated, ParameterKind::tensor_split,
                                                              ParameterKind::expert};
const char* to_string(ParameterKind kind);

class SplitModel {
 public:
  // Splits the groups out of `world` (every rank, the same order): tensor, expert, data, then
  // expert data (the ranks holding the same experts, where there are several).
  SplitModel(Communicator& world, const ParallelLayout& layout);

  ModelParallel model_parallel() const { return groups_.model_parallel(); }
  Communicator& data() const { return *data_; }
  // The other ranks holding this rank's experts (one per expert group); null where none.
  Communicator* expert_data() const { return expert_data_.get(); }
  void set_parameters(SplitParameters params) { params_ = std::move(params); }

  ParameterKind kind_of(const torch::Tensor& param) const;
  // Partial gradients summed over the tensor-parallel group; the experts' (`expert_grads`, one
  // flat view: FlatAdamW::local_grads) averaged as the unsplit model's would be: summed over the
  // ranks holding the same experts, divided by the data-parallel ranks; then the step's tensor-
  // and expert-parallel collectives appended to `out`.
  void complete_gradients(torch::Tensor expert_grads, std::vector<CollectiveSample>& out);
  // Weight of each parameter in the squared norm summed over the world: 1 / its copies among
  // the ranks whose squares are summed (ZeRO: each data-parallel rank sums its own shard).
  std::vector<double> norm_weights(const std::vector<torch::Tensor>& params, bool zero) const;
  // Ranks that must hold the same values of a `kind` parameter share this key.
  int peer_key(ParameterKind kind, int world_rank) const;
  // The subgroups' heartbeats quote the step (a timeout names it).
  void set_step(int64_t step);
  // Forgets the subgroups' collectives not yet taken: those run between steps.
  void drop_samples();

 private:
  ParallelLayout layout_;
  Subgroups groups_;
  std::unique_ptr<Communicator> data_;
  std::unique_ptr<Communicator> expert_data_;
  SplitParameters params_;
};

}  // namespace rcl
