#include "rocm_conformance_llm/workload/tensor_parallel.hpp"

#include "rocm_conformance_llm/workload/op_tap.hpp"

namespace rcl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group and the collective's name travel to backward through the context.
void remember(AutogradContext* ctx, ModelParallelGroup& group, const std::string& op) {
  ctx->saved_data["group"] = reinterpret_cast<int64_t>(&group);
  ctx->saved_data["op"] = op;
}
ModelParallelGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<ModelParallelGroup*>(ctx->saved_data["group"].toInt());
}
std::string op_of(AutogradContext* ctx) { return ctx->saved_data["op"].toStringRef(); }

// The collectives act on dim 0; the sequence is dim 1 of [B, T, C].
torch::Tensor sequence_first(const torch::Tensor& x) { return x.transpose(0, 1).contiguous(); }
torch::Tensor batch_first(const torch::Tensor& x) { return x.transpose(0, 1).contiguous(); }

torch::Tensor all_reduced(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  auto out = x.contiguous().clone();
  group.all_reduce_sum(out, "all_reduce." + op);
  return out;
}
torch::Tensor gathered(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return batch_first(group.all_gather_rows(sequence_first(x), "all_gather." + op));
}
torch::Tensor scattered(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return batch_first(group.reduce_scatter_rows(sequence_first(x), "reduce_scatter." + op));
}
torch::Tensor my_slice(const torch::Tensor& x, ModelParallelGroup& group) {
  TORCH_CHECK(x.size(1) % group.size() == 0, "sequence parallel: ", x.size(1), " tokens do not split over ",
              group.size(), " ranks");
  const int64_t part = x.size(1) / group.size();
  return x.narrow(1, group.rank() * part, part).contiguous();
}

// Each mapping: its forward collective and its backward one, named KIND.OP.fwd / KIND.OP.bwd.
struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ModelParallelGroup* g, std::string op) {
    remember(ctx, *g, op);
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {all_reduced(grad[0], group_of(ctx), op_of(ctx) + ".bwd"), {}, {}};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext*, torch::Tensor x, ModelParallelGroup* g, std::string op) {
    return all_reduced(x, *g, op + ".fwd");
  }
  static variable_list backward(AutogradContext*, variable_list grad) { return {grad[0], {}, {}}; }
};

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ModelParallelGroup* g, std::string op) {
    remember(ctx, *g, op);
    return gathered(x, *g, op + ".fwd");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {scattered(grad[0], group_of(ctx), op_of(ctx) + ".bwd"), {}, {}};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ModelParallelGroup* g, std::string op) {
    remember(ctx, *g, op);
    return scattered(x, *g, op + ".fwd");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {gathered(grad[0], group_of(ctx), op_of(ctx) + ".bwd"), {}, {}};
  }
};

struct SplitSequence : torch::autograd::Function<SplitSequence> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ModelParallelGroup* g, std::string op) {
    remember(ctx, *g, op);
    return my_slice(x, *g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {gathered(grad[0], group_of(ctx), op_of(ctx) + ".bwd"), {}, {}};
  }
};

struct GatherSequenceForReplicated : torch::autograd::Function<GatherSequenceForReplicated> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ModelParallelGroup* g, std::string op) {
    remember(ctx, *g, op);
    return gathered(x, *g, op + ".fwd");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {my_slice(grad[0], group_of(ctx)), {}, {}};
  }
};

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, ModelParallelGroup* g,
                               std::vector<int64_t> in_splits, std::vector<int64_t> out_splits, std::string op) {
    remember(ctx, *g, op);
    ctx->saved_data["in_splits"] = in_splits;
    ctx->saved_data["out_splits"] = out_splits;
    return g->all_to_all_rows(x.contiguous(), in_splits, out_splits, "all_to_all." + op + ".fwd");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    // The rows come back the way they went: the splits swapped.
    const auto in_splits = ctx->saved_data["in_splits"].toIntVector();
    const auto out_splits = ctx->saved_data["out_splits"].toIntVector();
    return {
        group_of(ctx).all_to_all_rows(grad[0].contiguous(), out_splits, in_splits, "all_to_all." + op_of(ctx) + ".bwd"),
        {},
        {},
        {},
        {}};
  }
};

}  // namespace

torch::Tensor copy_to_parallel_region(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return CopyToRegion::apply(x, &group, op);
}
torch::Tensor reduce_from_parallel_region(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return ReduceFromRegion::apply(x, &group, op);
}
torch::Tensor gather_sequence(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return GatherSequence::apply(x, &group, op);
}
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return ReduceScatterSequence::apply(x, &group, op);
}
torch::Tensor split_sequence(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return SplitSequence::apply(x, &group, op);
}
torch::Tensor gather_sequence_for_replicated(const torch::Tensor& x, ModelParallelGroup& group, const std::string& op) {
  return GatherSequenceForReplicated::apply(x, &group, op);
}
torch::Tensor all_to_all_rows(const torch::Tensor& x, ModelParallelGroup& group, const std::vector<int64_t>& in_splits,
                              const std::vector<int64_t>& out_splits, const std::string& op) {
  return AllToAllRows::apply(x, &group, in_splits, out_splits, op);
}

torch::Tensor TensorParallelLink::enter(const torch::Tensor& x) const {
  if (!group_) return x;
  return sequence_parallel_ ? gather_sequence(x, *group_, name_ + ".in")
                            : copy_to_parallel_region(x, *group_, name_ + ".in");
}

torch::Tensor TensorParallelLink::row_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                                      const torch::Tensor& bias, const char* site) const {
  if (!group_) return tapped_linear(x, weight, bias, site);
  const auto partial = tapped_linear(x, weight, {}, site);
  const auto reduced = sequence_parallel_ ? reduce_scatter_sequence(partial, *group_, name_ + ".out")
                                          : reduce_from_parallel_region(partial, *group_, name_ + ".out");
  return bias.defined() ? reduced + bias : reduced;
}

torch::Tensor column_shard(const torch::Tensor& full, const std::vector<int64_t>& block_rows, int rank, int degree) {
  std::vector<torch::Tensor> pieces;
  for (const auto& part : full.split_with_sizes(block_rows, 0)) {
    TORCH_CHECK(part.size(0) % degree == 0, "tensor parallel: ", part.size(0), " rows do not split over ", degree);
    const int64_t rows = part.size(0) / degree;
    pieces.push_back(part.narrow(0, rank * rows, rows));
  }
  return torch::cat(pieces, 0).contiguous();
}

torch::Tensor row_shard(const torch::Tensor& full, int rank, int degree) {
  TORCH_CHECK(full.size(1) % degree == 0, "tensor parallel: ", full.size(1), " columns do not split over ", degree);
  const int64_t cols = full.size(1) / degree;
  return full.narrow(1, rank * cols, cols).contiguous();
}

void assign_shard(torch::Tensor& param, const torch::Tensor& shard) {
  torch::NoGradGuard no_grad;
  param.set_data(shard.detach().clone());
}

void all_reduce_replicated_gradients(const std::vector<torch::Tensor>& params, ModelParallelGroup& group) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    grads.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
  if (grads.empty()) return;
  auto flat = torch::cat(grads);
  group.all_reduce_sum(flat, "all_reduce.partial_grads");
  int64_t at = 0;
  for (const auto& p : params) {
    const auto summed = flat.narrow(0, at, p.numel()).view_as(p);
    if (p.grad().defined()) p.mutable_grad().copy_(summed);
    else p.mutable_grad() = summed.clone();
    at += p.numel();
  }
}

}  // namespace rcl
