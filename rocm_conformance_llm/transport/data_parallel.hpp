// The data-parallel layouts, one class each over the data-parallel group: DDP's bucketed
// all-reduce (DdpBuckets, here), ZeRO's sharded optimizer (ZeroShards, sharded_sync.hpp) and
// FSDP's sharded parameters (FsdpShards, fsdp_sync.hpp). ProcessGroupSync holds the one the run
// asked for, beside the tensor or expert split (split_model.hpp), and hands it the step's calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/collective_sample.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"

namespace rcl {

class DataParallelLayout {
 public:
  virtual ~DataParallelLayout() = default;
  // Which shard of the flat optimizer buffer this rank updates: all of it ({0, 1}) unless the
  // layout shards the optimizer across the data-parallel ranks.
  virtual ShardOf optimizer_shard() const { return {}; }
  // The placed model, before the optimizer takes its parameters (FSDP shards it).
  virtual void shard_model(GPT& /*model*/) {}
  virtual void begin_step() {}
  // The accumulated gradients made ready for the update (GradientSync::sync_gradients).
  virtual void sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) = 0;
  // Sums a per-shard value over the ranks holding the other shards (the squared gradient norm).
  virtual void sum_over_ranks(torch::Tensor& /*value*/, std::vector<CollectiveSample>& /*out*/) {}
  // After the update (ZeRO gathers the others' shards, FSDP frees the root).
  virtual void after_update(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& /*out*/) {}
};

// DDP: every rank holds the whole model and optimizer; the gradients are averaged over the
// data-parallel group in buckets of about `bucket_bytes` (bigger buckets: fewer, larger RCCL
// messages; a tensor larger than a bucket goes alone).
class DdpBuckets final : public DataParallelLayout {
 public:
  DdpBuckets(Communicator& data, int64_t bucket_bytes) : data_(data), bucket_bytes_(bucket_bytes) {}
  void sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) override;
  // SUM all-reduce per bucket, then divide by the data-parallel world size. A parameter without
  // a gradient on this rank contributes zeros, so every rank sends the same bucket layout. Each
  // collective it ran is appended to `out`.
  void average_gradients(const std::vector<torch::Tensor>& params, std::vector<CollectiveSample>& out);

 private:
  Communicator& data_;
  int64_t bucket_bytes_;
};

// Broadcasts `tensors` from `group`'s first rank, in buckets of about `bucket_bytes` as DDP's
// gradients travel.
void broadcast_in_buckets(const std::vector<torch::Tensor>& tensors, Communicator& group, int64_t bucket_bytes);

// The layout `kind` over the data-parallel group `data`.
std::unique_ptr<DataParallelLayout> make_data_parallel_layout(DataParallel kind, Communicator& data,
                                                              int64_t bucket_bytes);

}  // namespace rcl
