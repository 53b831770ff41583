#include "rocm_conformance_llm/transport/sharded_sync.hpp"

namespace rcl {

nlohmann::json data_parallel_section(DataParallel requested, const ShardOf& optimizer_shard, int world_size,
                                     GPT& model) {
  // Sharded only where the data-parallel group has several ranks: a world split wholly into one
  // tensor-parallel group has a single replica, whose optimizer is whole.
  const int shards = optimizer_shard.count;
  const char* effect = shards > 1                       ? "sharded"
                       : requested == DataParallel::ddp ? "none: ddp keeps the optimizer whole on every rank"
                       : world_size > 1                 ? "none: one data-parallel rank has nothing to shard"
                                                        : "none: one rank has nothing to shard";
  nlohmann::json section = {{"requested", requested}, {"optimizer_shards", shards}, {"effect", effect}};
  if (const FsdpModel* fsdp = model->fsdp()) {
    // What FSDP changes beyond ZeRO: the parameters themselves are sharded, so between steps a
    // rank holds its shards only; each block is gathered for its forward and again for its
    // recomputed backward.
    section["parameters"] = "sharded";
    section["parameter_units"] = fsdp->units();
    section["parameter_shard_bytes"] = fsdp->shard_bytes();
    section["activation_recomputation"] = true;
  } else if (world_size > 1) {
    section["parameters"] = "replicated";
  }
  // A mixture of experts: how many of the model's expert parameters this rank stores (with their
  // gradients and AdamW moments): a 1/expert-degree share of them where the experts are split.
  int64_t experts_here = 0, expert_parameters_here = 0;
  for (auto& block : model->blocks()) {
    if (block->moe.is_empty()) continue;
    experts_here = block->moe->local_experts();
    for (const auto& p : block->moe->expert_parameters()) expert_parameters_here += p.numel();
  }
  if (experts_here > 0) {
    const int64_t expert_degree = model->parallel().expert ? model->parallel().expert->size() : 1;
    section["experts_per_rank"] = experts_here;
    section["expert_parameters_per_rank"] = expert_parameters_here;
    section["expert_parameters"] = expert_parameters_here * expert_degree;
    section["expert_storage"] = expert_degree > 1 ? "sharded" : "every expert on every rank";
  }
  return section;
}

void ZeroShards::sync_gradients(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  torch::Tensor padded = optimizer.padded_grads();
  torch::Tensor mine = optimizer.shard_grads();
  // A later sync in one step: this shard holds the earlier average plus this rank's micro-steps
  // since; only those are averaged now (the other shards hold only them: zeroed at the last sync).
  const bool later = syncs_this_step_++ > 0;
  if (later) mine.sub_(synced_);
  // In place: the shard is chunk rank() of the input, the aliasing RCCL's reduce-scatter allows.
  out.push_back(comm_.reduce_scatter(mine, padded, ReduceOp::avg, "reduce_scatter_grads"));
  if (later) mine.add_(synced_);
  if (synced_.defined() && synced_.sizes() == mine.sizes()) synced_.copy_(mine);
  else synced_ = mine.clone();
  const int64_t offset = optimizer.shard_offset();
  padded.narrow(0, 0, offset).zero_();
  const int64_t after = offset + mine.numel();
  padded.narrow(0, after, padded.numel() - after).zero_();
}

void ZeroShards::sum_over_ranks(torch::Tensor& value, std::vector<CollectiveSample>& out) {
  out.push_back(comm_.all_reduce(value, ReduceOp::sum, "allreduce_grad_norm"));
}

void ZeroShards::after_update(FlatAdamW& optimizer, std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  torch::Tensor padded = optimizer.padded_params();
  // A copy of the shard: Gloo's list all-gather (libtorch 1.13) must not read what it writes.
  const torch::Tensor mine = optimizer.shard_params().clone();
  out.push_back(comm_.all_gather_into(padded, mine, "allgather_params"));
}

}  // namespace rcl
