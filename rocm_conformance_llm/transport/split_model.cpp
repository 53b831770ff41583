#include "rocm_conformance_llm/transport/split_model.hpp"

#include <algorithm>

#include "rocm_conformance_llm/workload/tensor_parallel.hpp"

namespace rcl {
namespace {

bool contains(const std::vector<torch::Tensor>& list, const torch::Tensor& t) {
  return std::any_of(list.begin(), list.end(),
                     [&](const torch::Tensor& p) { return p.unsafeGetTensorImpl() == t.unsafeGetTensorImpl(); });
}

}  // namespace

const char* to_string(ParameterKind kind) {
  switch (kind) {
    case ParameterKind::replicated: return "replicated";
    case ParameterKind::tensor_split: return "tensor-parallel shards";
    case ParameterKind::expert: return "experts";
  }
  return "?";
}

SplitModel::SplitModel(Communicator& world, const ParallelLayout& layout)
    : layout_(layout), groups_(make_subgroups(world, layout)), data_(make_data_parallel_group(world, layout)) {
  if (layout.expert_degree > 1 && layout.expert_degree < layout.data_degree)
    expert_replicas_ = world.split("ep_replicas", layout.expert_replica_group(world.rank()));
}

ParameterKind SplitModel::kind_of(const torch::Tensor& param) const {
  if (contains(params_.experts, param)) return ParameterKind::expert;
  if (contains(params_.tensor_split, param)) return ParameterKind::tensor_split;
  return ParameterKind::replicated;
}

std::vector<torch::Tensor> SplitModel::averaged_over_data(const std::vector<torch::Tensor>& params) const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params)
    if (!contains(params_.experts, p)) out.push_back(p);
  return out;
}

void SplitModel::complete_gradients(std::vector<CollectiveSample>& out) {
  torch::NoGradGuard no_grad;
  if (groups_.tensor && !params_.partial.empty()) all_reduce_replicated_gradients(params_.partial, *groups_.tensor);
  if (!params_.experts.empty()) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_.experts) grads.push_back(p.grad().reshape(-1));
    torch::Tensor flat = torch::cat(grads).div_(layout_.expert_degree);
    if (expert_replicas_) {
      out.push_back(expert_replicas_->all_reduce_sum(flat, "allreduce_expert_grads"));
      flat.div_(expert_replicas_->world_size());
    }
    int64_t at = 0;
    for (const auto& p : params_.experts) {
      p.grad().copy_(flat.narrow(0, at, p.numel()).view_as(p));
      at += p.numel();
    }
  }
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group)
      for (auto& s : group->take_samples()) out.push_back(std::move(s));
}

std::vector<double> SplitModel::norm_weights(const std::vector<torch::Tensor>& params, bool zero) const {
  const double data_shards = zero ? layout_.data_degree : 1;
  std::vector<double> weights;
  for (const auto& p : params) {
    int copies = layout_.world_size;  // replicated
    switch (kind_of(p)) {
      case ParameterKind::tensor_split: copies = layout_.data_degree; break;
      // Replicated over the tensor-parallel group and over the experts' replicas.
      case ParameterKind::expert: copies = layout_.tensor_degree * layout_.data_degree / layout_.expert_degree; break;
      case ParameterKind::replicated: break;
    }
    weights.push_back(data_shards / copies);
  }
  return weights;
}

int SplitModel::peer_key(ParameterKind kind, int world_rank) const {
  switch (kind) {
    case ParameterKind::replicated: return 0;
    case ParameterKind::tensor_split: return world_rank % layout_.tensor_degree;
    case ParameterKind::expert: return world_rank / layout_.tensor_degree % layout_.expert_degree;
  }
  return 0;
}

void SplitModel::set_step(int64_t step) {
  data_->set_step(step);
  if (expert_replicas_) expert_replicas_->set_step(step);
  for (const auto& group : {groups_.tensor, groups_.expert})
    if (group) group->communicator().set_step(step);
}

}  // namespace rcl
