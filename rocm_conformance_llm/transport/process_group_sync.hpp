// Data-parallel gradient averaging over a c10d group (Gloo on CPU, RCCL on ROCm), plus the
// cross-rank RCCL checks whose verdicts every rank learns: an exact all-reduce canary, a
// parameter fingerprint, collective sequence numbers and per-rank step times.
// The gradient sync is defined in process_group_sync.cpp, the checks in process_group_checks.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/transport/collective_battery.hpp"
#include "rocm_conformance_llm/transport/comm_checks.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/fsdp_sync.hpp"
#include "rocm_conformance_llm/transport/grad_sync.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"
#include "rocm_conformance_llm/transport/parallelize.hpp"
#include "rocm_conformance_llm/transport/sharded_sync.hpp"
#include "rocm_conformance_llm/transport/split_model.hpp"

namespace rcl {

// Every rank's step time and busy time (step time minus time inside collectives).
struct RankStepTimes {
  std::vector<double> step_s;
  std::vector<double> busy_s;
};

// One collective battery case as every rank agrees on it.
struct CollectiveCheckRow {
  BatteryCase c;
  std::string route;                // how this backend carried it (route_collective)
  double seconds = 0.0;             // the slowest rank's: a collective ends when its last rank does
  double bus_bandwidth_gbps = 0.0;  // from `seconds`
  std::vector<int> wrong_ranks;     // ranks whose output was not the exact expected one
};

struct CollectiveBatteryResult {
  std::vector<CollectiveCheckRow> rows;
  std::vector<Finding> findings;  // collective_result_mismatch, at most one per battery
};

class ProcessGroupSync final : public GradientSync {
 public:
  // `bucket_mb`: gradients are flattened into buckets of about this size per all-reduce
  // (bigger buckets: fewer, larger RCCL messages; a tensor larger than a bucket goes alone).
  // Validated with the config (bucket_mb > 0).
  // `data_parallel`: "ddp" (bucketed all-reduce), "zero" (ZeroShards: the optimizer state
  // and the gradients sharded across the ranks) or "fsdp" (FsdpShards: the parameters too).
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

  // DDP's step: SUM all-reduce per bucket, then divide by the data-parallel world size. A
  // parameter without a gradient on this rank contributes zeros, so every rank sends the same
  // bucket layout. Each collective it ran is appended to `out`.
  void average_gradients(const std::vector<torch::Tensor>& params, std::vector<CollectiveSample>& out);
  // Which shard of the flat optimizer buffer this rank updates: all of it ({0, 1}) unless ZeRO or
  // FSDP shards the optimizer across the data-parallel ranks.
  ShardOf optimizer_shard() const;

  // Splits the model-parallel groups out of this world (every rank, at setup): from then on the
  // gradients are averaged (DDP) or sharded (ZeRO) over the data-parallel group, and the
  // parameter checks compare only the ranks that must hold equal values.
  void split_model(const ParallelLayout& layout);
  // The split model's parameters (split_parameters, which parallelize records itself).
  void set_split_parameters(SplitParameters params);

  // Every rank starts from rank 0's parameters (in buckets, like the gradients); a split model's
  // from its data-parallel group's first rank, its experts from the first rank holding them.
  void broadcast_parameters(const std::vector<torch::Tensor>& params);
  // Each rank's `values` (same length everywhere), indexed [rank][i], exact in float64.
  std::vector<std::vector<double>> all_gather_values(const std::vector<double>& values, const std::string& op);

  // --- checks: each returns the findings (component RCCL) every rank agrees on ------------
  // All-reduce of exact integers at sizes that take RCCL's different protocols (LL for small
  // messages, LL128, Simple for large); every rank's mismatch count is gathered so a wrong
  // result on any rank is reported by all of them.
  std::vector<Finding> run_canary();
  // Every collective kind, op and dtype of the battery (collective_battery.hpp), then every
  // rank's verdict and time gathered, so all ranks report the same rows and findings: the
  // ranks whose output was wrong and, where the kind tells, the rank whose data came back wrong.
  CollectiveBatteryResult run_collective_battery(const std::vector<BatteryCase>& cases, uint64_t seed,
                                                 const BatteryFaults& faults = {});
  // Names each rank whose parameters are not bitwise identical to the majority's (a split
  // model: of the ranks that must hold the same values, per kind of parameter).
  std::vector<Finding> compare_parameters(const std::vector<torch::Tensor>& params);
  // Compares, through the store (not the transport, which is what desynchronises), how many
  // collectives each rank has entered; names a rank that skipped or added one.
  std::vector<Finding> compare_collective_sequences();
  // This rank's step time and the part of it spent inside collectives (waiting for peers
  // included) in; every rank's step and busy times out.
  RankStepTimes gather_step_times(double step_time_s, double collective_s);

  // Self-test of the canary: this rank adds `offset` to its contribution (0 = healthy).
  void inject_canary_fault(double offset) { canary_fault_offset_ = offset; }

 private:
  Finding finding(const std::string& signature, Severity severity, std::string message, nlohmann::json evidence) const;

  std::unique_ptr<Communicator> comm_;
  int64_t bucket_bytes_;
  Communicator& data_comm() const { return split_ ? split_->data() : *comm_; }

  std::unique_ptr<SplitModel> split_;  // tensor or expert parallel; null: whole replicas
  std::optional<ZeroShards> zero_;     // data_parallel "zero", over the data-parallel group
  std::optional<FsdpShards> fsdp_;     // data_parallel "fsdp" (never with a split model)
  double canary_fault_offset_ = 0.0;
  int64_t sequence_checks_ = 0;  // names each store exchange uniquely
};

// LocalSync for one process; otherwise a ProcessGroupSync over a group built from `launch`
// (Gloo for a CPU device, RCCL for a GPU) as `plan` lays it out, with cfg.bucket_mb and
// cfg.data_parallel (which, in a world of one, has nothing to shard: logged, not an error).
std::shared_ptr<GradientSync> make_gradient_sync(const LaunchInfo& launch, const GroupPlan& plan,
                                                 const TrainingConfig& cfg, const torch::Device& device);

}  // namespace rcl
