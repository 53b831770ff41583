// The trainer's only view of other ranks: the parallel layout it trains under and the few calls a
// step makes to keep the ranks together. A single process uses LocalSync; a c10d group (Gloo on
// CPU; on a GPU c10d's "nccl" group, RCCL on ROCm) implements the same interface in transport/.
// What differs per layout (DDP, ZeRO's sharded optimizer, FSDP's sharded parameters, tensor and
// expert parallelism) is set up by `parallelize` before the loop and lives behind the step's
// calls: the step makes the same calls whichever it is (docs/distributed.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/collective_sample.hpp"
#include "rocm_conformance_llm/transport/parallelize.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

class Communicator;
class SplitModel;

// Which replica of the data a rank trains on, of how many: the ranks of one tensor-parallel group
// are one replica (same batch, same dropout seed).
struct DataReplica {
  int index = 0;
  int count = 1;
};

// This rank's place in the job, one value that the trainer, the checks and the reports read:
// its rank, the world's size, the c10d backend of its device's collectives as recorded in
// config.json ("gloo", "rccl" or "nccl"; "none" in a world of one), its data replica, the
// world's group (its store carries the job report's records; null in a world of one) and the
// model's split over it (which ranks hold the same values of each kind of parameter; null for
// whole replicas). The cross-rank checks work over it (checks/detectors/cross_rank_checks.hpp).
struct World {
  int rank = 0;
  int size = 1;
  std::string backend = "none";
  DataReplica replica{};
  Communicator* communicator = nullptr;
  const SplitModel* split = nullptr;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  const World& world() const { return world_; }
  int rank() const { return world_.rank; }
  int world_size() const { return world_.size; }
  const std::string& backend() const { return world_.backend; }
  DataReplica data_replica() const { return world_.replica; }

  // --- before the loop ---------------------------------------------------------------------
  // Applies this layout to the freshly built `model` (transport/parallelize.hpp): the tensor and
  // expert split first, then `place` (the trainer moves the model to its device), then FSDP's
  // sharding of what is on the device. Returns what the optimizer is built from.
  virtual ParallelizedModel parallelize(GPT& model, const std::function<void()>& place) {
    place();
    return optimizer_parameters(model);
  }

  // --- the step, in this order ---------------------------------------------------------------
  // The 1-based optimizer step about to run. A group quotes it in its heartbeat, so a
  // collective that times out on one rank names the step every other rank was at.
  virtual void begin_step(int64_t /*step*/) {}
  // The accumulated gradients made ready for the update (every grad_sync_interval micro-steps):
  // DDP averages the data-parallel replicas'; ZeRO reduce-scatters them so this rank holds the
  // average of its shard; FSDP reduce-scattered each block's in its backward and now does the
  // root's. Each collective it ran is appended to `out`.
  virtual void sync_gradients(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& /*out*/) {}
  // Once per step, after its last sync_gradients: the gradients a split model still owes
  // (partial ones summed over the tensor-parallel group, experts' averaged over the ranks
  // holding them), and the step's tensor- and expert-parallel collectives appended to `out`.
  virtual void complete_gradients(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& /*out*/) {}
  // Sums a per-shard device value over the ranks that hold the other shards (the squared
  // gradient norm); only called when the optimizer's shard or the model's split leaves a part.
  virtual void sum_over_shards(torch::Tensor& /*value*/, std::vector<CollectiveSample>& /*out*/) {}
  // After the update: where each rank updated its shard, every rank gathers the others'.
  virtual void after_update(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& /*out*/) {}
  // Mean of a scalar across ranks (loss, for identical logs on every rank; stop votes).
  virtual double mean_across_ranks(double value) = 0;
  // Every rank takes the same starting parameters: rank 0's (a split model's from its
  // data-parallel group's first rank, its experts from the first rank holding them). Before step
  // 1, by the cross-rank checks' preflight, which then proves them equal.
  virtual void broadcast_parameters(const std::vector<torch::Tensor>& /*params*/) {}

 protected:
  explicit GradientSync(World world) : world_(std::move(world)) {}
  // A split model: the ranks of one tensor-parallel group become one data replica (split_model).
  void set_split(const SplitModel* split, DataReplica replica) {
    world_.split = split;
    world_.replica = replica;
  }

 private:
  World world_;
};

// World of one: nothing to synchronise.
class LocalSync final : public GradientSync {
 public:
  LocalSync() : GradientSync(World{}) {}
  double mean_across_ranks(double value) override { return value; }
};

}  // namespace rcl
