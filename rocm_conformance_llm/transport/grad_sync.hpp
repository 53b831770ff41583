// The trainer's only view of other ranks: gradient averaging plus the few scalar reductions a
// step needs. A single process uses LocalSync; a c10d group (Gloo on CPU; on a GPU c10d's
// "nccl" group, RCCL on ROCm) implements the same interface in transport/. The data-parallel
// strategy (training.data_parallel: DDP, ZeRO's sharded optimizer, or FSDP's sharded parameters)
// lives behind it too: the step calls the same four points whichever it is (docs/distributed.md, "Sharded data parallel").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/collective_sample.hpp"
#include "rocm_conformance_llm/workload/model_parallel.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Average the .grad of every parameter across ranks, in place. Each collective it ran is
  // appended to `out` (op, bytes, seconds, bus bandwidth, sequence number).
  virtual void average_gradients(const std::vector<torch::Tensor>& params,
                                 std::vector<CollectiveSample>& out) = 0;
  // Mean of a scalar across ranks (loss, for identical logs on every rank).
  virtual double mean_across_ranks(double value) = 0;

  // --- the data-parallel strategy: what the step calls, in this order ----------------------
  // Which shard of the flat optimizer buffer this rank updates: all of it ({0, 1}) unless the
  // optimizer is sharded across ranks.
  virtual ShardOf optimizer_shard() const { return {}; }
  // Called once with the model on its device, before the optimizer takes its parameters: FSDP
  // shards the parameters themselves here (GPTImpl::shard_fully); the others leave it whole.
  virtual void shard_parameters(GPT& /*model*/) {}
  // The accumulated gradients made ready for the update (every grad_sync_interval micro-steps):
  // DDP averages all the data-parallel replicas' (average_gradients); ZeRO reduce-scatters them so
  // this rank holds the average of its shard; FSDP reduce-scattered each block's in its backward
  // and now does the root's. A rank's own experts are complete_gradients' to average.
  virtual void sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
    average_gradients(optimizer.shared_parameters(), out);
  }
  // Sums a per-shard device value over the ranks that hold the other shards (the squared
  // gradient norm); only called when optimizer_shard() has several.
  virtual void sum_over_shards(torch::Tensor& /*value*/, std::vector<CollectiveSample>& /*out*/) {}
  // After the update: where each rank updated its shard, every rank gathers the others'.
  virtual void after_update(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& /*out*/) {}

  // --- model parallelism (tensor, expert): docs/distributed.md ---------------------------
  // The groups the model is split over; empty (nothing split) unless the layout has them.
  virtual ModelParallel model_parallel() const { return {}; }
  // Which replica of the data this rank trains on, of how many: the ranks of one
  // tensor-parallel group are one replica (same batch, same dropout seed).
  virtual int data_rank() const { return rank(); }
  virtual int data_world_size() const { return world_size(); }
  // The split model's parameters (GPT::split_parameters), once, before the optimizer is built.
  virtual void set_split_parameters(SplitParameters /*params*/) {}
  // Each of `params`' weight in the global squared gradient norm (FlatAdamW::weigh_norm);
  // empty when the plain norm is the global one.
  virtual std::vector<double> norm_weights(const std::vector<torch::Tensor>& /*params*/) const { return {}; }
  // Once per step, after the step's last sync_gradients: the gradients a split model still
  // owes (partial ones summed over the tensor-parallel group, experts' averaged over the ranks
  // holding them), and the step's tensor- and expert-parallel collectives appended to `out`.
  virtual void complete_gradients(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& /*out*/) {}

  // The 1-based optimizer step about to run. A group quotes it in its heartbeat, so a
  // collective that times out on one rank names the step every other rank was at.
  virtual void begin_step(int64_t /*step*/) {}
  // The c10d backend the collectives of the training device's tensors go through, as recorded
  // in config.json: "gloo", "rccl" or "nccl"; "none" in a world of one.
  virtual std::string backend() const { return "none"; }
};

// World of one: nothing to synchronise.
class LocalSync final : public GradientSync {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void average_gradients(const std::vector<torch::Tensor>&, std::vector<CollectiveSample>&) override {}
  double mean_across_ranks(double value) override { return value; }
};

}  // namespace rcl
