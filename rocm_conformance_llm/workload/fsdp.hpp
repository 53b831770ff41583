// Fully sharded data parallel (training.data_parallel=fsdp), as PyTorch's FSDP2 (torchtitan's
// default) runs it: every rank keeps one equal shard of each unit's parameters, a unit being one
// decoder block, plus the root (embeddings, final norm). Per block the forward all-gathers the
// block's parameters, runs it without keeping activations and frees them; the backward gathers
// them again, recomputes the block from its saved input (activation recomputation, the random
// state of the forward replayed) and back-propagates through it, then reduce-scatters (AVG) the
// block's gradients so each rank keeps the average of its shard, and frees the parameters again.
// The root is gathered at the start of every forward and kept until the end of the step (FSDP2's
// root; freed at once after a forward without gradients); its gradients are reduce-scattered after
// the backward. Between steps a rank holds only
// its shards: the optimizer's flat buffer (docs/distributed.md, "Sharded data parallel").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace rcl {

// The collectives FSDP issues, over the data-parallel ranks: the model (workload layer) calls
// them, the transport layer runs them through the Communicator and records each one.
class ShardGroup {
 public:
  virtual ~ShardGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // all_gather_into_tensor: `out` (size() * in.numel()) holds rank r's `in` at chunk r.
  virtual void all_gather(torch::Tensor& out, const torch::Tensor& in, const std::string& op) = 0;
  // reduce_scatter_tensor, AVG: `out` becomes the mean over ranks of chunk rank() of `in`.
  virtual void reduce_scatter_avg(torch::Tensor& out, const torch::Tensor& in, const std::string& op) = 0;
};

// One FSDP unit: a set of parameters laid out back to back (decayed ones first) in a buffer
// padded to a multiple of the group size; this rank keeps chunk rank() of it as two leaf tensors
// (its decayed part and the rest), which the optimizer takes as its parameters. The unit's own
// parameters hold no storage while released.
class FsdpUnit {
 public:
  FsdpUnit(std::string name, std::vector<torch::Tensor> decayed, std::vector<torch::Tensor> plain,
           std::shared_ptr<ShardGroup> group);

  const std::string& name() const { return name_; }
  // This rank's chunk: [decayed part, the rest] (either may be empty). Leaves that require grad.
  const torch::Tensor& decayed_shard() const { return decayed_shard_; }
  const torch::Tensor& plain_shard() const { return plain_shard_; }

  // All-gathers the full parameters ("fsdp:all_gather.<name>.<when>") and points the unit's
  // parameters at them.
  void gather(const std::string& when);
  // Frees the full parameters: each parameter is left as an empty tensor.
  void release();
  // Reduce-scatter (AVG, "fsdp:reduce_scatter.<name>") of the full gradients (in parameter order,
  // undefined ones as zeros); returns this rank's chunk as {decayed part, the rest}.
  std::vector<torch::Tensor> reduce_scatter(const std::vector<torch::Tensor>& grads);
  // Copies the full parameters' values (gathered) into this rank's chunk: after a checkpoint was
  // loaded into them.
  void keep_own_chunk();

  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // Bytes of the full parameters now resident (0 while released).
  int64_t resident_bytes() const;

 private:
  std::string name_;
  std::shared_ptr<ShardGroup> group_;
  std::vector<torch::Tensor> params_;  // decayed first
  std::vector<std::vector<int64_t>> shapes_;
  int64_t total_ = 0;
  int64_t chunk_ = 0;  // padded total / group size
  int64_t decayed_in_chunk_ = 0;
  torch::Tensor decayed_shard_, plain_shard_;
  torch::Tensor full_;  // the gathered buffer while gathered
  bool gathered_ = false;
};

// One block as FSDP runs it: its unit, and its forward (which reads the unit's parameters).
struct FsdpBlock {
  std::shared_ptr<FsdpUnit> unit;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// The whole model's units: one per block and the root (transport/parallelize.hpp's fully_shard
// cuts them from a built model).
class FsdpModel {
 public:
  FsdpModel(std::vector<FsdpBlock> blocks, std::shared_ptr<FsdpUnit> root)
      : blocks_(std::move(blocks)), root_(std::move(root)) {}

  // The optimizer's parameters: every unit's decayed part, and every unit's other part.
  std::vector<torch::Tensor> decayed_shards() const;
  std::vector<torch::Tensor> plain_shards() const;

  // The start of a forward: the root gathered ("fsdp:all_gather.root.fwd").
  void begin_forward();
  // The end of a forward: without gradients (evaluation) no backward follows, and the root is
  // freed at once.
  void end_forward();
  // Block `index` (its parameters gathered, run, freed) through the autograd function whose
  // backward gathers again, recomputes and reduce-scatters.
  torch::Tensor block_forward(int64_t index, const torch::Tensor& x);
  // After the backward (each gradient sync): the root's accumulated gradients reduce-scattered
  // into its shard's gradients, then dropped.
  void reduce_scatter_root_gradients();
  // The end of a step: the root freed.
  void end_step();

  // Every unit gathered ("full"), as a checkpoint reads or writes the whole model, and freed
  // again by release_all (after keep_own_chunks where the full values were loaded).
  void gather_all();
  void keep_own_chunks();
  void release_all();

  // Units: the blocks and the root.
  int64_t units() const { return int64_t(blocks_.size()) + 1; }
  // Bytes of full (gathered) block and root parameters now resident.
  int64_t resident_parameter_bytes() const;
  // Bytes of this rank's shards (the optimizer's parameters).
  int64_t shard_bytes() const;

 private:
  std::vector<FsdpBlock> blocks_;
  std::shared_ptr<FsdpUnit> root_;
};

// While alive, the whole model gathered (FsdpModel::gather_all: collectives, so every rank opens
// one), as a checkpoint or a cross-rank check reads or writes it; freed after. Nothing for a null
// model (not sharded).
class GatheredParameters {
 public:
  explicit GatheredParameters(FsdpModel* fsdp) : fsdp_(fsdp) {
    if (fsdp_) fsdp_->gather_all();
  }
  ~GatheredParameters() {
    if (fsdp_) fsdp_->release_all();
  }
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;
  // The values written into the gathered parameters (loaded, broadcast) become this rank's shards.
  void keep_values() {
    if (fsdp_) fsdp_->keep_own_chunks();
  }

 private:
  FsdpModel* fsdp_;
};

}  // namespace rcl
