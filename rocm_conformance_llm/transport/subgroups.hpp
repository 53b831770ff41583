// Tensor-, data- and expert-parallel subgroups split out of the world, as Megatron lays them out:
// tensor-parallel groups are consecutive ranks (the fastest links), data-parallel groups the
// ranks with the same tensor-parallel index; experts are sharded over the data-parallel group.
// Where the world does not allow a requested degree, the largest one it allows is used and the
// choice is recorded (ParallelLayout::notes: config.json and the console), never a crash.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/workload/model_parallel.hpp"

namespace rcl {

struct ParallelLayout {
  int world_size = 1;
  int tensor_degree = 1;    // ranks per tensor-parallel group
  int data_degree = 1;      // world_size / tensor_degree
  int expert_degree = 1;    // ranks the experts are sharded over (1: every expert local)
  int64_t moe_experts = 0;  // the model's experts: moe_experts, or distributed_moe_experts where it applies
  bool sequence_parallel = false;
  std::vector<std::string> notes;  // each degree that differs from the one asked for, and why

  // Rank `rank`'s groups, as world ranks in group-rank order.
  std::vector<int> tensor_group(int rank) const;
  std::vector<int> data_group(int rank) const;
  std::vector<int> expert_group(int rank) const;  // consecutive members of its data-parallel group
  int expert_rank(int rank) const;                // its index in its expert group: which experts it holds
  // The ranks holding the same experts as `rank`: its data-parallel group's members of the same
  // expert rank, one per expert group.
  std::vector<int> expert_data_group(int rank) const;
};

// The degrees `cfg` asks for, fitted to `world_size`: tensor parallel the largest divisor of
// gcd(asked, world) that divides the heads, the key/value heads and, sequence parallel, seq_len
// (so the MLP width too: it is a multiple of the hidden size);
// experts over gcd(moe_experts, data-parallel ranks). cfg.distributed_moe_experts gives the
// model experts only where moe_experts is 0 and there are several data-parallel ranks. A world of
// one is all ones (and no distributed experts), recorded.
ParallelLayout plan_parallel_layout(const TrainingConfig& cfg, int world_size);
// The group a run's ranks form, planned once (run/run_setup.cpp) and read by whatever forms or
// probes it: the layout fitted to the world, how long a collective (the rendezvous too) may
// wait before it is a hang (training.collective_timeout_s), and the model that layout trains.
struct GroupPlan {
  ParallelLayout layout;
  std::chrono::milliseconds collective_timeout{};
  // The run's config with distributed_moe_experts' experts where the world shards them: what the
  // model is built from and sized as.
  TrainingConfig model;
};
GroupPlan plan_group(const TrainingConfig& cfg, int world_size);
nlohmann::json to_json(const ParallelLayout& layout);

// A ModelParallelGroup over a Communicator subgroup. Every collective it runs is kept, its op
// named "GROUP:KIND.WHERE.fwd|bwd" (e.g. "tp:all_reduce.block0.attn.out.fwd"), until taken (take_samples): the
// trainer appends them to the step's record, so report.json's collectives table has them.
class CommunicatorGroup final : public ModelParallelGroup {
 public:
  CommunicatorGroup(std::string name, std::unique_ptr<Communicator> comm);
  int rank() const override;
  int size() const override;
  std::string name() const override { return name_; }
  void all_reduce_sum(torch::Tensor& tensor, const std::string& op) override;
  torch::Tensor all_gather_rows(const torch::Tensor& in, const std::string& op) override;
  torch::Tensor reduce_scatter_rows(const torch::Tensor& in, const std::string& op) override;
  torch::Tensor all_to_all_rows(const torch::Tensor& in, const std::vector<int64_t>& in_splits,
                                const std::vector<int64_t>& out_splits, const std::string& op) override;

  std::vector<CollectiveSample> take_samples();
  Communicator& communicator() { return *comm_; }

 private:
  std::string label(const std::string& op) const { return name_ + ":" + op; }
  std::string name_;
  std::unique_ptr<Communicator> comm_;
  std::vector<CollectiveSample> samples_;
};

// This rank's groups for `layout` (each null where its degree is 1), split out of `world`.
// Every rank of the world calls it, in the same order: tensor, then expert groups.
struct Subgroups {
  std::shared_ptr<CommunicatorGroup> tensor;
  std::shared_ptr<CommunicatorGroup> expert;
  bool sequence_parallel = false;
  ModelParallel model_parallel() const;
};
Subgroups make_subgroups(Communicator& world, const ParallelLayout& layout);
// The data-parallel group of this rank (gradient averaging over the replicas of its shard).
std::unique_ptr<Communicator> make_data_parallel_group(Communicator& world, const ParallelLayout& layout);
// The ranks holding this rank's experts (ParallelLayout::expert_data_group, "edp"): null where
// the experts are not split or each is held by one rank of the data-parallel group.
std::unique_ptr<Communicator> make_expert_data_parallel_group(Communicator& world, const ParallelLayout& layout);

}  // namespace rcl
