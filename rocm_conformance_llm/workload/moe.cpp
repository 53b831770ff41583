#include "rocm_conformance_llm/workload/moe.hpp"

#include <cmath>

#include "rocm_conformance_llm/workload/model_widths.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"
#include "rocm_conformance_llm/workload/tensor_parallel.hpp"

namespace rcl {
namespace {

// Each expert's rows padded with zeros to a multiple of this (dropped again after): as block-sparse
// MoE kernels pad to their block (MegaBlocks: 128 rows). Without it every step brings new GEMM
// shapes, and the BLAS libraries' per-shape caches (oneDNN's primitives on CPU, the GEMM
// heuristics' on a GPU) grow for hundreds of steps: memory growth that is no leak.
constexpr int64_t kExpertRowBlock = 64;

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  const auto host = t.to(torch::kCPU, torch::kLong).contiguous();
  return {host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel()};
}

}  // namespace

MoeFeedForwardImpl::MoeFeedForwardImpl(const TrainingConfig& cfg)
    : experts_(cfg.moe_experts), top_k_(cfg.moe_top_k), swiglu_(cfg.activation == Activation::swiglu) {
  const int64_t c = cfg.hidden_size, ffn = ffn_hidden_size(cfg);
  const int64_t up_width = swiglu_ ? 2 * ffn : ffn;
  router = register_module("router", torch::nn::Linear(torch::nn::LinearOptions(c, experts_).bias(false)));
  // Each expert initialised as the dense MLP is, its down projection scaled by 1/sqrt(2L).
  const double residual_std = cfg.init_std / std::sqrt(2.0 * double(cfg.num_layers));
  torch::NoGradGuard no_grad;
  router->weight.normal_(0.0, cfg.init_std);
  w_up = register_parameter("w_up", torch::empty({experts_, up_width, c}).normal_(0.0, cfg.init_std));
  b_up = register_parameter("b_up", torch::zeros({experts_, up_width}));
  w_down = register_parameter("w_down", torch::empty({experts_, c, ffn}).normal_(0.0, residual_std));
  b_down = register_parameter("b_down", torch::zeros({experts_, c}));
}

void MoeFeedForwardImpl::shard(std::shared_ptr<ModelParallelGroup> experts) {
  if (!experts || experts->size() == 1) return;
  TORCH_CHECK(experts_ % experts->size() == 0, "expert parallel: ", experts_, " experts do not split over ",
              experts->size(), " ranks");
  const int64_t local = experts_ / experts->size(), first = local * experts->rank();
  for (auto* param : {&w_up, &b_up, &w_down, &b_down}) assign_shard(*param, param->narrow(0, first, local));
  group_ = std::move(experts);
}

std::vector<std::pair<std::string, torch::Tensor>> MoeFeedForwardImpl::gather_experts(const std::string& where) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/false)) {
    const torch::Tensor mine = item.value().detach();
    out.emplace_back(item.key(),
                     group_ ? group_->all_gather_rows(mine, "all_gather.export." + where + "." + item.key()) : mine);
  }
  return out;
}

// rows sorted by local expert, rows_per_expert [local experts] -> each row through its expert.
torch::Tensor MoeFeedForwardImpl::experts_forward(const torch::Tensor& rows, const torch::Tensor& rows_per_expert) {
  std::vector<torch::Tensor> outputs;
  int64_t at = 0;
  const auto counts = to_vector(rows_per_expert);
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t padded = (counts[e] + kExpertRowBlock - 1) / kExpertRowBlock * kExpertRowBlock;
    const auto mine = torch::constant_pad_nd(rows.narrow(0, at, counts[e]), {0, 0, 0, padded - counts[e]});
    at += counts[e];
    const auto expert = static_cast<int64_t>(e);  // this rank's e-th
    const auto h = tapped_linear(mine, w_up[expert], b_up[expert], "moe.up");
    torch::Tensor act;
    if (swiglu_) {
      const auto gate_value = h.chunk(2, -1);
      act = torch::silu(gate_value[0]) * gate_value[1];
    } else {
      act = torch::gelu(h);
    }
    outputs.push_back(tapped_linear(act, w_down[expert], b_down[expert], "moe.down").narrow(0, 0, counts[e]));
  }
  return torch::cat(outputs, 0);
}

torch::Tensor MoeFeedForwardImpl::forward(const torch::Tensor& x) {
  const int64_t width = x.size(-1);
  const auto tokens = x.reshape({-1, width});

  // Router: softmax over every expert in float32 at least, top-k, the k weights renormalised.
  const auto probs = router(tokens).to(at::promote_types(x.scalar_type(), torch::kFloat)).softmax(-1);
  const auto top = probs.topk(top_k_, -1);
  const auto weights = std::get<0>(top) / std::get<0>(top).sum(-1, /*keepdim=*/true);
  const auto chosen = std::get<1>(top).reshape(-1);  // [n * k] expert of each token-expert pair

  // Pairs sorted by expert (stable: a token's pairs keep their order), counted per expert.
  const auto order = std::get<1>(chosen.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  const auto token_of_pair = order.div(top_k_, "floor");
  last_counts_ = torch::bincount(chosen, {}, experts_);
  auto dispatched = tokens.index_select(0, token_of_pair);

  const int ranks = group_ ? group_->size() : 1;
  const int64_t local = experts_ / ranks;
  torch::Tensor received = dispatched;
  torch::Tensor received_counts = last_counts_.view({1, experts_});  // [source rank, local expert]
  std::vector<int64_t> send_splits, receive_splits;
  if (group_) {
    // The counts first: each rank learns how many rows each peer sends to each of its experts.
    const auto ones = std::vector<int64_t>(ranks, 1);
    received_counts = group_->all_to_all_rows(last_counts_.view({ranks, local}), ones, ones, "all_to_all.moe_counts");
    send_splits = to_vector(last_counts_.view({ranks, local}).sum(1));
    receive_splits = to_vector(received_counts.sum(1));
    received = all_to_all_rows(dispatched, *group_, send_splits, receive_splits, "moe_dispatch");
  }

  // Received rows come by source rank, then expert: regroup them by local expert, run the experts,
  // and put the results back in received order.
  const auto expert_of_row = torch::arange(local, received_counts.options())
                                 .repeat({received_counts.size(0)})
                                 .repeat_interleave(received_counts.reshape(-1));
  const auto by_expert = std::get<1>(expert_of_row.sort(/*stable=*/true, 0, false));
  const auto computed = experts_forward(received.index_select(0, by_expert), received_counts.sum(0));
  auto results = torch::zeros_like(computed).index_copy(0, by_expert, computed);

  if (group_) results = all_to_all_rows(results, *group_, receive_splits, send_splits, "moe_combine");

  const auto pair_weights = weights.reshape(-1).index_select(0, order).unsqueeze(1).to(results.scalar_type());
  // In the experts' output dtype (autocast's, like the dense MLP's), not the input's.
  const auto combined =
      torch::zeros(tokens.sizes(), results.options()).index_add(0, token_of_pair, results * pair_weights);
  return combined.view(x.sizes());
}

}  // namespace rcl
