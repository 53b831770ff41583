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
  bool fused = false;         // ATen's fused AdamW kernel (needs fused_adamw_available())
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

// at::_fused_adamw_ serves every device this build runs on: libtorch >= 2.4 (its CPU kernel
// came in 2.4; CUDA and ROCm builds have it since 2.0). One kernel reads and writes each buffer
// once, where the plain update is a dozen whole-buffer ops.
bool fused_adamw_available();

class FlatAdamW {
 public:
  // Every parameter once, all of one dtype and device. Their values are moved into the flat
  // buffer (decayed ones first) and each gets a gradient that is a view of the flat gradient:
  // autograd accumulates into it in place, so the views stay valid for the whole run.
  FlatAdamW(const std::vector<torch::Tensor>& decayed, const std::vector<torch::Tensor>& not_decayed,
            AdamWHyper hyper, ShardOf shard = {});

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

  // What a checkpoint holds besides the parameters: this shard's moments.
  struct State {
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
    int64_t steps = 0;
  };
  State state() const;  // a copy
  void load_state(const State& state);

  const torch::Tensor& flat_params() const { return flat_params_; }
  const torch::Tensor& flat_grads() const { return flat_grads_; }
  // The parameters in buffer order: their gradients lie back to back, so gradient buckets
  // planned in this order are views of the flat gradient (no copies around the all-reduce).
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }

  const ShardOf& shard() const { return shard_; }
  bool sharded() const { return shard_.count > 1; }
  // The buffers with their padding (count equal chunks), and this shard: chunk `index` of them.
  const torch::Tensor& padded_params() const { return padded_params_; }
  const torch::Tensor& padded_grads() const { return padded_grads_; }
  const torch::Tensor& shard_params() const { return shard_params_; }
  const torch::Tensor& shard_grads() const { return shard_grads_; }
  int64_t shard_offset() const { return shard_offset_; }

 private:
  // The update of step(), at step `step`, through at::_fused_adamw_ (hyper_.fused).
  void fused_step(double lr, const torch::Tensor& apply, int64_t step);

  AdamWHyper hyper_;
  ShardOf shard_;
  std::vector<torch::Tensor> parameters_;
  torch::Tensor padded_params_, padded_grads_;  // the storage: flat_* and shard_* are views of it
  torch::Tensor flat_params_, flat_grads_;
  torch::Tensor shard_params_, shard_grads_;
  int64_t shard_offset_ = 0;
  torch::Tensor shard_norm_weights_;  // weigh_norm's, per element of this shard; undefined: all 1
  int64_t decayed_in_shard_ = 0;  // shard_params_[0, decayed_in_shard_) takes weight decay
  State state_;
};

}  // namespace rcl
