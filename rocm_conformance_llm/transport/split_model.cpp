#include "rocm_conformance_llm/transport/split_model.hpp"

#include <algorithm>

#include "rocm_conformance_llm/workload/tensor_parallel.hpp"

namespace rcl {

const char* to_string(ParameterKind kind) {
  return kind == ParameterKind::tensor_split ? "tensor-parallel shards" : "replicated";
}

SplitModel::SplitModel(Communicator& world, const ParallelLayout& layout)
    : layout_(layout), groups_(make_subgroups(world, layout)), data_(make_data_parallel_group(world, layout)) {}

ParameterKind SplitModel::kind_of(const torch::Tensor& param) const {
  const bool split = std::any_of(params_.tensor_split.begin(), params_.tensor_split.end(), [&](const torch::Tensor& p) {
    return p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl();
  });
  return split ? ParameterKind::tensor_split : ParameterKind::replicated;
}

void SplitModel::complete_gradients(std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  if (groups_.tensor && !params_.partial.empty()) all_reduce_replicated_gradients(params_.partial, *groups_.tensor);
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group)
      for (auto& s : group->take_samples()) out.push_back(std::move(s));
}

std::vector<double> SplitModel::norm_weights(const std::vector<torch::Tensor>& params, bool zero) const {
  const double data_shards = zero ? layout_.data_degree : 1;
  std::vector<double> weights;
  for (const auto& p : params) {
    const bool split = kind_of(p) == ParameterKind::tensor_split;
    weights.push_back(data_shards / (split ? layout_.data_degree : layout_.world_size));
  }
  return weights;
}

int SplitModel::peer_key(ParameterKind kind, int world_rank) const {
  return kind == ParameterKind::tensor_split ? world_rank % layout_.tensor_degree : 0;
}

void SplitModel::set_step(int64_t step) {
  data_->set_step(step);
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group) group->communicator().set_step(step);
}

}  // namespace rcl
