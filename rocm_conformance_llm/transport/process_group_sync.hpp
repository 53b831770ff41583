// Data-parallel gradient averaging over a c10d group (Gloo on CPU, RCCL on ROCm), under the
// layout the run planned: DDP's buckets, ZeRO's or FSDP's shards, a tensor or expert split. The
// cross-rank checks that verify the group are checks/detectors/cross_rank_checks.hpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/data_parallel.hpp"
#include "rocm_conformance_llm/transport/fsdp_sync.hpp"
#include "rocm_conformance_llm/transport/grad_sync.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"
#include "rocm_conformance_llm/transport/parallelize.hpp"
#include "rocm_conformance_llm/transport/sharded_sync.hpp"
#include "rocm_conformance_llm/transport/split_model.hpp"

namespace rcl {

class ProcessGroupSync final : public GradientSync {
 public:
  // `bucket_mb`: gradients are flattened into buckets of about this size per all-reduce
  // (DdpBuckets; validated with the config, bucket_mb > 0). `data_parallel`: the layout over the
  // data-parallel group (transport/data_parallel.hpp): "ddp" (DdpBuckets), "zero" (ZeroShards:
  // the optimizer state and the gradients sharded across the ranks) or "fsdp" (FsdpShards: the
  // parameters too).
  ProcessGroupSync(std::unique_ptr<Communicator> comm, double bucket_mb,
                   DataParallel data_parallel = DataParallel::ddp);

  // The model split over the groups split_model made (parallelize_split), placed, then fully
  // sharded under FSDP (fully_shard); the optimizer's shard is ZeRO's or FSDP's, and a split
  // model's norm weighs each parameter by its copies.
  ParallelizedModel parallelize(GPT& model, const std::function<void()>& place) override;
  void begin_step(int64_t step) override;
  void sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;
  void complete_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;
  void sum_over_shards(torch::Tensor& value, std::vector<CollectiveSample>& out) override;
  void after_update(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;
  double mean_across_ranks(double value) override;

  // Splits the model-parallel groups out of this world (every rank, at setup): from then on the
  // gradients are averaged (DDP) or sharded (ZeRO) over the data-parallel group, and the
  // parameter checks compare only the ranks that must hold equal values.
  void split_model(const ParallelLayout& layout);
  // The split model's parameters (split_parameters, which parallelize records itself).
  void set_split_parameters(SplitParameters params);

  // In buckets, like the gradients.
  void broadcast_parameters(const std::vector<torch::Tensor>& params) override;

 private:
  std::unique_ptr<Communicator> comm_;
  int64_t bucket_bytes_;
  DataParallel kind_;
  std::unique_ptr<SplitModel> split_;                  // tensor or expert parallel; null: whole replicas
  std::unique_ptr<DataParallelLayout> data_parallel_;  // DDP, ZeRO or FSDP over the data-parallel group
};

// LocalSync for one process; otherwise a ProcessGroupSync over a group built from `launch`
// (Gloo for a CPU device, RCCL for a GPU) as `plan` lays it out, with cfg.bucket_mb and
// cfg.data_parallel (which, in a world of one, has nothing to shard: logged, not an error).
std::shared_ptr<GradientSync> make_gradient_sync(const LaunchInfo& launch, const GroupPlan& plan,
                                                 const TrainingConfig& cfg, const torch::Device& device);

}  // namespace rcl
