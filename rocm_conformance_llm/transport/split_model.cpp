#include "rocm_conformance_llm/transport/split_model.hpp"

#include <algorithm>

#include "rocm_conformance_llm/workload/tensor_parallel.hpp"

namespace rcl {

const char* to_string(ParameterKind kind) {
  switch (kind) {
    case ParameterKind::tensor_split: return "tensor-parallel shards";
    case ParameterKind::expert: return "experts";
    case ParameterKind::replicated: break;
  }
  return "replicated";
}

SplitModel::SplitModel(Communicator& world, const ParallelLayout& layout)
    : layout_(layout),
      groups_(make_subgroups(world, layout)),
      data_(make_data_parallel_group(world, layout)),
      expert_data_(make_expert_data_parallel_group(world, layout)) {}

ParameterKind SplitModel::kind_of(const torch::Tensor& param) const {
  const auto listed = [&](const std::vector<torch::Tensor>& params) {
    return std::any_of(params.begin(), params.end(),
                       [&](const torch::Tensor& p) { return p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl(); });
  };
  if (listed(params_.experts)) return ParameterKind::expert;
  return listed(params_.tensor_split) ? ParameterKind::tensor_split : ParameterKind::replicated;
}

void SplitModel::complete_gradients(torch::Tensor expert_grads, std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  if (groups_.tensor && !params_.partial.empty()) all_reduce_replicated_gradients(params_.partial, *groups_.tensor);
  // Each holder's gradient sums its expert group's tokens' contributions (each rank's loss a mean
  // over its own batch): the unsplit model's data-parallel mean is their sum over every expert
  // group, over the data-parallel ranks.
  if (expert_grads.numel() > 0) {
    if (expert_data_) out.push_back(expert_data_->all_reduce_sum(expert_grads, "allreduce_expert_grads"));
    expert_grads.div_(layout_.data_degree);
  }
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group)
      for (auto& s : group->take_samples()) out.push_back(std::move(s));
}

std::vector<double> SplitModel::norm_weights(const std::vector<torch::Tensor>& params, bool zero) const {
  const double data_shards = zero ? layout_.data_degree : 1;
  std::vector<double> weights;
  for (const auto& p : params) {
    switch (kind_of(p)) {
      case ParameterKind::tensor_split: weights.push_back(data_shards / layout_.data_degree); break;
      // Every holder sums all its experts, ZeRO or not: 1 / (world / expert degree) copies.
      case ParameterKind::expert: weights.push_back(double(layout_.expert_degree) / layout_.world_size); break;
      case ParameterKind::replicated: weights.push_back(data_shards / layout_.world_size); break;
    }
  }
  return weights;
}

int SplitModel::peer_key(ParameterKind kind, int world_rank) const {
  switch (kind) {
    case ParameterKind::tensor_split: return world_rank % layout_.tensor_degree;
    case ParameterKind::expert: return layout_.expert_rank(world_rank);
    case ParameterKind::replicated: break;
  }
  return 0;
}

void SplitModel::drop_samples() {
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group) group->take_samples();
}

void SplitModel::set_step(int64_t step) {
  data_->set_step(step);
  if (expert_data_) expert_data_->set_step(step);
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group) group->communicator().set_step(step);
}

}  // namespace rcl
