#include "rocm_conformance_llm/transport/process_group_sync.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

namespace rcl {
namespace {

int64_t tensor_bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// Consecutive tensors of one dtype and device, up to about `bucket_bytes` per bucket; a tensor
// bigger than a bucket travels alone.
std::vector<std::vector<torch::Tensor>> plan_buckets(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes) {
  std::vector<std::vector<torch::Tensor>> buckets;
  int64_t filled = 0;
  for (const auto& t : tensors) {
    const bool fits = !buckets.empty() && buckets.back().front().dtype() == t.dtype() &&
                      buckets.back().front().device() == t.device() && filled + tensor_bytes(t) <= bucket_bytes;
    if (!fits) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(t);
    filled += tensor_bytes(t);
  }
  return buckets;
}

// True when the bucket's tensors are contiguous and lie back to back in one storage, as the
// gradients of FlatAdamW do: the bucket is then a view of that storage (DDP's
// gradient-as-bucket-view) and needs neither the flattening copy nor the copy back.
bool back_to_back(const std::vector<torch::Tensor>& bucket) {
  for (size_t i = 0; i < bucket.size(); ++i) {
    if (!bucket[i].is_contiguous()) return false;
    if (i == 0) continue;
    const auto& before = bucket[i - 1];
    if (!bucket[i].storage().is_alias_of(before.storage()) ||
        bucket[i].storage_offset() != before.storage_offset() + before.numel())
      return false;
  }
  return true;
}

// Runs `reduce` on each bucket as one flat buffer, and leaves the result in the bucket's tensors.
template <typename Reduce>
void for_each_flat_bucket(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes, Reduce&& reduce) {
  for (const auto& bucket : plan_buckets(tensors, bucket_bytes)) {
    if (back_to_back(bucket)) {
      int64_t numel = 0;
      for (const auto& t : bucket) numel += t.numel();
      const auto& first = bucket.front();
      auto view = first.as_strided({numel}, {1}, first.storage_offset());
      reduce(view);
      continue;
    }
    std::vector<torch::Tensor> pieces;
    for (const auto& t : bucket) pieces.push_back(t.reshape(-1));
    auto flat = torch::cat(pieces);
    reduce(flat);
    int64_t offset = 0;
    for (const auto& t : bucket) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

}  // namespace

namespace {
World world_of(Communicator& comm) {
  return {.rank = comm.rank(),
          .size = comm.world_size(),
          .backend = comm.backend(),
          .replica = {comm.rank(), comm.world_size()},
          .communicator = &comm};
}
}  // namespace

ProcessGroupSync::ProcessGroupSync(std::unique_ptr<Communicator> comm, double bucket_mb, DataParallel data_parallel)
    : GradientSync(world_of(*comm)),
      comm_(std::move(comm)),
      bucket_bytes_(std::max<int64_t>(1, std::llround(bucket_mb * 1048576.0))) {
  if (data_parallel == DataParallel::zero) zero_.emplace(*comm_);
  if (data_parallel == DataParallel::fsdp) fsdp_.emplace(*comm_);
}

void ProcessGroupSync::average_gradients(const std::vector<torch::Tensor>& params, std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  Communicator& data = data_comm();
  if (data.world_size() == 1) return;  // a split model over the whole world: one replica
  const double world = data.world_size();
  for_each_flat_bucket(grads, bucket_bytes_, [&](torch::Tensor& flat) {
    out.push_back(data.all_reduce_sum(flat, "allreduce"));
    flat.div_(world);
  });
}

// Host tensors: the Communicator sends them through Gloo whatever the backend, so the host's own
// values (the loss mean, the stop votes of every step, the checks' figures) never wait for the
// device nor read it back: with several ranks on a GPU each would be a blocking read per step.
double ProcessGroupSync::mean_across_ranks(double value) {
  torch::Tensor t = torch::tensor({value}, torch::kDouble);
  comm_->all_reduce_sum(t, "allreduce_scalar");
  return *t.data_ptr<double>() / world_size();
}

void ProcessGroupSync::broadcast_parameters(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  // A rank's experts come from the first rank holding the same ones (none: its own are the only).
  std::vector<torch::Tensor> data, experts;
  for (const auto& p : params)
    (split_ && split_->kind_of(p) == ParameterKind::expert ? experts : data).push_back(p.detach());
  const auto broadcast = [&](const std::vector<torch::Tensor>& tensors, Communicator& group) {
    for_each_flat_bucket(tensors, bucket_bytes_,
                         [&](torch::Tensor& flat) { group.broadcast(flat, 0, "broadcast_params"); });
  };
  broadcast(data, data_comm());
  if (Communicator* holders = split_ ? split_->expert_data() : nullptr; holders && !experts.empty())
    broadcast(experts, *holders);
}

ShardOf ProcessGroupSync::optimizer_shard() const {
  if (fsdp_) return fsdp_->optimizer_shard();
  return zero_ ? zero_->shard() : ShardOf{};
}

ParallelizedModel ProcessGroupSync::parallelize(GPT& model, const std::function<void()>& place) {
  // Tensor or expert parallel: each rank keeps its shard of the full weights, before they reach
  // the device and the optimizer's flat buffer.
  SplitParameters split;
  if (split_ && split_->model_parallel().splits_model()) {
    split = parallelize_split(model, split_->model_parallel());
    set_split_parameters(split);
  }
  place();
  if (fsdp_) fsdp_->shard_model(model);  // the optimizer takes this rank's shards of the parameters
  ParallelizedModel out = optimizer_parameters(model);
  out.optimizer_shard = optimizer_shard();
  out.experts = std::move(split.experts);  // this rank's alone
  if (split_)
    out.norm_weights = [layout = split_.get(), zero = zero_.has_value()](const std::vector<torch::Tensor>& params) {
      return layout->norm_weights(params, zero);
    };
  return out;
}

void ProcessGroupSync::sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  if (zero_) zero_->reduce_scatter_gradients(optimizer, out);
  else if (fsdp_) fsdp_->sync_gradients(out);
  else average_gradients(optimizer.shared_parameters(), out);
}

void ProcessGroupSync::sum_over_shards(torch::Tensor& value, std::vector<CollectiveSample>& out) {
  if (split_)  // the weighted squares of every rank's parameters (norm_weights)
    out.push_back(comm_->all_reduce(value, ReduceOp::sum, "allreduce_grad_norm"));
  else if (zero_) zero_->sum_over_ranks(value, out);
  else if (fsdp_) fsdp_->sum_over_ranks(value, out);
}

void ProcessGroupSync::after_update(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  if (zero_) zero_->gather_parameters(optimizer, out);
  if (fsdp_) fsdp_->after_update(out);
}

void ProcessGroupSync::begin_step(int64_t step) {
  comm_->set_step(step);
  if (split_) split_->set_step(step);
  if (zero_) zero_->begin_step();
  // A step's records are its own collectives: the groups' calls of forwards between steps
  // (evaluation, the attention probe's and the start-up's input capture, the export's gather)
  // belong to no training step.
  if (split_) split_->drop_samples();
  if (fsdp_) fsdp_->drop_samples();
}

void ProcessGroupSync::split_model(const ParallelLayout& layout) {
  split_ = std::make_unique<SplitModel>(*comm_, layout);
  if (zero_) zero_.emplace(split_->data());  // ZeRO's shards: over the data-parallel group
  set_split(split_.get(), {split_->data().rank(), split_->data().world_size()});
}

void ProcessGroupSync::set_split_parameters(SplitParameters params) {
  if (split_) split_->set_parameters(std::move(params));
}

void ProcessGroupSync::complete_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  if (split_) split_->complete_gradients(optimizer.local_grads(), out);
}

std::shared_ptr<GradientSync> make_gradient_sync(const LaunchInfo& launch, const GroupPlan& plan,
                                                 const TrainingConfig& cfg, const torch::Device& device) {
  if (!launch.distributed()) {  // cfg is validated (config.cpp)
    if (cfg.data_parallel != DataParallel::ddp)
      spdlog::info("data_parallel={} has no effect in a world of one rank: nothing to shard",
                   name_of(cfg.data_parallel));
    return std::make_shared<LocalSync>();
  }
  auto sync = std::make_shared<ProcessGroupSync>(Communicator::connect(launch, device, plan.collective_timeout),
                                                 cfg.bucket_mb, cfg.data_parallel);
  if (plan.layout.tensor_degree > 1 || plan.layout.expert_degree > 1) sync->split_model(plan.layout);
  return sync;
}

}  // namespace rcl
