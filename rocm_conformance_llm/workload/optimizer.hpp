#pragma once
// AdamW (decoupled weight decay) over one flat buffer. The parameters and their gradients are
// re-pointed at views of two contiguous tensors, so zeroing, the gradient norm, clipping and the
// update are a dozen whole-buffer ops per step instead of about fifteen per parameter. On a GPU
// that is a dozen HIP kernel launches instead of hundreds (launch latency dominates a small
// model's optimizer); on CPU it removes most of the per-step dispatch work of the smoke model.
// The arithmetic is torch::optim::AdamW's, element for element (tests/unit/test_trainer.cpp).

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace rcl {

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied to the `decayed` parameters only
  bool fused = false;         // the one-pass update (needs fused_adamw_available(device))
};

// Which of `count` equal shards of the flat buffer this optimizer updates and keeps moments for
// (ZeRO: each rank one shard). The buffer is padded with zeros to a multiple of `count`, so the
// shards are the equal chunks a reduce-scatter and an all-gather need. {0, 1}: all of it.
// `given` (FSDP): the parameters handed to the optimizer are already this rank's shards of the
// model (workload/fsdp.hpp); the whole buffer is shard `index`, not split again.
struct ShardOf {
  int index = 0;
  int count = 1;
  bool given = false;
};

// A one-pass AdamW serves `device`: at::_fused_adamw_ on every device from libtorch 2.4 (its CPU
// kernel came in 2.4; CUDA and ROCm builds have it since 2.0), and before it our host loop on the
// CPU (workload/adamw_host_loop.hpp). One pass reads and writes each buffer once, where the
// plain update is a dozen whole-buffer ops.
bool fused_adamw_available(torch::DeviceType device);

class FlatAdamW {
 public:
  // Every parameter once, all of one dtype and device. Their values are moved into the flat
  // buffer (decayed ones first) and each gets a gradient that is a view of the flat gradient:
  // autograd accumulates into it in place, so the views stay valid for the whole run.
  // `local` (each also in `decayed` or `not_decayed`): parameters this rank holds alone, no
  // data-parallel replicas (an expert-parallel rank's experts). They lie first in the storage,
  // outside the `shard.count` equal shards, and this rank updates all of them and keeps all
  // their moments, whichever shard it updates of the others.
  FlatAdamW(const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& not_decayed, AdamWHyper hyper,
            ShardOf shard = {}, const std::vector<torch::Tensor>& local = {});

  void zero_grad();
  // torch::nn::utils::clip_grad_norm_ without its host read-back: returns the total L2 norm of
  // the gradients (before clipping) as a device scalar, so the step never waits for the GPU.
  // max_norm 0 measures without clipping. Sharded, the norm is over every rank's shard: this
  // shard's sum of squares goes through `sum_over_shards` (an all-reduce, in place) first.
  torch::Tensor clip_grad_norm(double max_norm, const std::function<void(torch::Tensor&)>& sum_over_shards = {});
  // Applies the update where `apply` (a device bool scalar) is true; where false, parameters
  // and moments stay bit for bit as they were. Decided on the device: no host read. Sharded,
  // only this shard's parameters change (an all-gather then brings the others').
  void step(double lr, const torch::Tensor& apply);
  // A model split across ranks: each parameter's weight in the squared gradient norm, in
  // parameters() order: 1 / the number of ranks whose sum of squares (sum_over_shards) counts
  // the same value, so that sum is the whole model's. Set, the sum always goes through it.
  void weigh_norm(const std::vector<double>& per_parameter);
  // Takes back `n` counted steps whose updates were withheld (bias correction counts updates).
  void forget_steps(int64_t n) { state_.steps -= n; }

  // What a checkpoint holds besides the parameters: the local parameters' moments, then this
  // shard's.
  struct State {
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
    int64_t steps = 0;
  };
  State state() const;  // a copy
  State state_on(const torch::Device& where) const;  // a copy on `where`
  void load_state(const State& state);

  const torch::Tensor& flat_params() const { return flat_params_; }
  const torch::Tensor& flat_grads() const { return flat_grads_; }
  // Every parameter: the shared ones, then the local ones (each group in storage order).
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  // All but the local ones (the data-parallel replicas), in storage order: their gradients lie
  // back to back, so gradient buckets planned in this order are views of the flat gradient (no
  // copies around the all-reduce); and the local ones' gradients, one flat view.
  const std::vector<torch::Tensor>& shared_parameters() const { return shared_parameters_; }
  const torch::Tensor& local_grads() const { return local_grads_; }

  const ShardOf& shard() const { return shard_; }
  bool sharded() const { return shard_.count > 1; }
  // The shared parameters' buffers with their padding (count equal chunks), and this shard:
  // chunk `index` of them.
  const torch::Tensor& padded_params() const { return padded_params_; }
  const torch::Tensor& padded_grads() const { return padded_grads_; }
  const torch::Tensor& shard_params() const { return shard_params_; }
  const torch::Tensor& shard_grads() const { return shard_grads_; }
  int64_t shard_offset() const { return shard_offset_; }

 private:
  // What this rank updates, in up to two contiguous pieces: the local parameters, this shard.
  struct Updated {
    torch::Tensor params, grads, exp_avg, exp_avg_sq;
    torch::Tensor norm_weights;  // weigh_norm's, per element; undefined: all 1
    int64_t decayed = 0;         // params[0, decayed) takes weight decay
    int64_t offset = 0;          // where params starts in the storage
  };
  // The update of step() on `part`, at step `step`, in one pass (hyper_.fused): through
  // at::_fused_adamw_, or the host loop where libtorch lacks it.
  void fused_step(Updated& part, double lr, const torch::Tensor& apply, int64_t step);

  AdamWHyper hyper_;
  ShardOf shard_;
  std::vector<torch::Tensor> parameters_, shared_parameters_;
  std::vector<int64_t> offsets_;                  // each parameter's in the storage
  torch::Tensor storage_params_, storage_grads_;  // the local parameters, then the padded shared ones
  torch::Tensor padded_params_, padded_grads_;
  torch::Tensor flat_params_, flat_grads_;
  torch::Tensor shard_params_, shard_grads_;
  torch::Tensor local_grads_;
  int64_t shard_offset_ = 0;
  std::vector<Updated> updated_;  // the local parameters (if any), then this shard
  bool weighed_ = false;
  State state_;
};

}  // namespace rcl
