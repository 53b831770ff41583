// FSDP (training.data_parallel=fsdp) over the Communicator: the ShardGroup the model's units
// gather and reduce-scatter through (workload/fsdp.hpp), and what the step adds around them: the
// root's gradients reduce-scattered after the backward, the 1-element all-reduce of the squared
// gradient norm, the root freed after the update. Every collective is recorded, its op named
// "fsdp:KIND.UNIT[.fwd|.bwd|.full]" (e.g. "fsdp:all_gather.block3.fwd", "fsdp:reduce_scatter.block3").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/data_parallel.hpp"
#include "rocm_conformance_llm/workload/fsdp.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

class CommunicatorShardGroup final : public ShardGroup {
 public:
  explicit CommunicatorShardGroup(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.world_size(); }
  void all_gather(torch::Tensor& out, const torch::Tensor& in, const std::string& op) override;
  void reduce_scatter_avg(torch::Tensor& out, const torch::Tensor& in, const std::string& op) override;
  // The collectives run since the last call, in order.
  std::vector<CollectiveSample> take_samples() { return std::exchange(samples_, {}); }

 private:
  Communicator& comm_;
  std::vector<CollectiveSample> samples_;
};

class FsdpShards final : public DataParallelLayout {
 public:
  explicit FsdpShards(Communicator& comm) : comm_(comm), group_(std::make_shared<CommunicatorShardGroup>(comm)) {}

  ShardOf optimizer_shard() const override { return {comm_.rank(), comm_.world_size(), /*given=*/true}; }
  // Shards `model` over the ranks (fully_shard); the step's calls below act on it.
  void shard_model(GPT& model) override;
  // Forgets the units' collectives not yet taken: those ran between steps.
  void begin_step() override { group_->take_samples(); }
  // After the backward: the root's gradients reduce-scattered; with the blocks' collectives of
  // the forward and backward, appended to `out`.
  void sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;
  void sum_over_ranks(torch::Tensor& value, std::vector<CollectiveSample>& out) override;
  // After the update: the root freed; the collectives since the last sync (none in a plain step)
  // appended to `out`.
  void after_update(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;

 private:
  Communicator& comm_;
  std::shared_ptr<CommunicatorShardGroup> group_;
  FsdpModel* model_ = nullptr;
};

}  // namespace rcl
