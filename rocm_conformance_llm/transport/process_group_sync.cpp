#include "rocm_conformance_llm/transport/process_group_sync.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

namespace rcl {
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
      bucket_bytes_(std::max<int64_t>(1, std::llround(bucket_mb * 1048576.0))),
      kind_(data_parallel),
      data_parallel_(make_data_parallel_layout(kind_, *comm_, bucket_bytes_)) {}

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
  broadcast_in_buckets(data, split_ ? split_->data() : *comm_, bucket_bytes_);
  if (Communicator* holders = split_ ? split_->expert_data() : nullptr; holders && !experts.empty())
    broadcast_in_buckets(experts, *holders, bucket_bytes_);
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
  data_parallel_->shard_model(model);  // FSDP: the optimizer takes this rank's shards of the parameters
  ParallelizedModel out = optimizer_parameters(model);
  out.optimizer_shard = data_parallel_->optimizer_shard();
  out.experts = std::move(split.experts);  // this rank's alone
  if (split_)
    out.norm_weights = [layout = split_.get(), zero = kind_ == DataParallel::zero](
                           const std::vector<torch::Tensor>& params) { return layout->norm_weights(params, zero); };
  return out;
}

void ProcessGroupSync::sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  data_parallel_->sync_gradients(optimizer, out);
}

void ProcessGroupSync::sum_over_shards(torch::Tensor& value, std::vector<CollectiveSample>& out) {
  if (split_)  // the weighted squares of every rank's parameters (norm_weights)
    out.push_back(comm_->all_reduce(value, ReduceOp::sum, "allreduce_grad_norm"));
  else data_parallel_->sum_over_ranks(value, out);
}

void ProcessGroupSync::after_update(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  data_parallel_->after_update(optimizer, out);
}

void ProcessGroupSync::begin_step(int64_t step) {
  comm_->set_step(step);
  if (split_) split_->set_step(step);
  // A step's records are its own collectives: the groups' calls of forwards between steps
  // (evaluation, the attention probe's and the start-up's input capture, the export's gather)
  // belong to no training step (the split's dropped here, FSDP's units' by its begin_step).
  if (split_) split_->drop_samples();
  data_parallel_->begin_step();
}

void ProcessGroupSync::split_model(const ParallelLayout& layout) {
  split_ = std::make_unique<SplitModel>(*comm_, layout);
  // DDP's buckets and ZeRO's shards: over the data-parallel group (FSDP is never split).
  data_parallel_ = make_data_parallel_layout(kind_, split_->data(), bucket_bytes_);
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
