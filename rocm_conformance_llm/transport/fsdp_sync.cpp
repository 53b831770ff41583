#include "rocm_conformance_llm/transport/fsdp_sync.hpp"

#include <stdexcept>

#include "rocm_conformance_llm/transport/parallelize.hpp"

namespace rcl {

void CommunicatorShardGroup::all_gather(torch::Tensor& out, const torch::Tensor& in, const std::string& op) {
  samples_.push_back(comm_.all_gather_into(out, in, "fsdp:" + op));
}

void CommunicatorShardGroup::reduce_scatter_avg(torch::Tensor& out, const torch::Tensor& in, const std::string& op) {
  samples_.push_back(comm_.reduce_scatter(out, in, ReduceOp::avg, "fsdp:" + op));
}

void FsdpShards::shard_model(GPT& model) { model_ = &fully_shard(model, group_); }

void FsdpShards::sync_gradients(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& out) {
  if (!model_) throw std::logic_error("FsdpShards: the model was not sharded");
  model_->reduce_scatter_root_gradients();
  for (auto& sample : group_->take_samples()) out.push_back(std::move(sample));
}

void FsdpShards::sum_over_ranks(torch::Tensor& value, std::vector<CollectiveSample>& out) {
  out.push_back(comm_.all_reduce(value, ReduceOp::sum, "allreduce_grad_norm"));
}

void FsdpShards::after_update(FlatAdamW& /*optimizer*/, std::vector<CollectiveSample>& out) {
  if (model_) model_->end_step();
  for (auto& sample : group_->take_samples()) out.push_back(std::move(sample));
}

}  // namespace rcl
