// The GPT's tensor-parallel split (Megatron's layout): attention Q/K/V column-parallel by heads,
// the output projection row-parallel; MLP up (gate and up for SwiGLU) column-parallel, down
// row-parallel; experts sharded over the expert-parallel group (workload/moe.hpp). Each rank keeps
// its slice of the full weights the seeded init drew, so the split model computes what the whole
// one does (tests/unit/test_tensor_parallel.cpp, test_moe.cpp).
#include "rocm_conformance_llm/model.hpp"

#include <map>

namespace rcl {

void CausalSelfAttentionImpl::shard(const ModelParallel& parallel, const std::string& name) {
  const int degree = parallel.tensor_degree(), rank = parallel.tensor_rank();
  TORCH_CHECK(num_heads_ % degree == 0, "tensor parallel: ", num_heads_, " heads do not split over ", degree);
  TORCH_CHECK(kv_heads_ % degree == 0, "tensor parallel: ", kv_heads_, " key/value heads do not split over ", degree);
  // Q, K and V are three row blocks of the fused weight (K and V narrower under grouped-query
  // attention); heads are consecutive rows in each, so each rank keeps whole query groups.
  const std::vector<int64_t> blocks{num_heads_ * head_dim_, kv_heads_ * head_dim_, kv_heads_ * head_dim_};
  assign_shard(qkv->weight, column_shard(qkv->weight, blocks, rank, degree));
  assign_shard(qkv->bias, column_shard(qkv->bias, blocks, rank, degree));
  if (conv_kernel_ > 0) {
    // Depthwise: one filter per Q/K/V channel, so the channels split with the heads.
    assign_shard(qkv_conv_->weight, column_shard(qkv_conv_->weight, blocks, rank, degree));
    qkv_conv_->options.in_channels(qkv_conv_->weight.size(0)).out_channels(qkv_conv_->weight.size(0))
        .groups(qkv_conv_->weight.size(0));
  }
  assign_shard(proj->weight, row_shard(proj->weight, rank, degree));
  num_heads_ /= degree;
  kv_heads_ /= degree;
  tp_ = TensorParallelLink(parallel.tensor, parallel.sequence_parallel, name);
}

void MlpImpl::shard(const ModelParallel& parallel, const std::string& name) {
  const int degree = parallel.tensor_degree(), rank = parallel.tensor_rank();
  const int64_t parts = swiglu_ ? 2 : 1;  // SwiGLU: gate and up, each split the same way
  const std::vector<int64_t> blocks(parts, up->weight.size(0) / parts);
  assign_shard(up->weight, column_shard(up->weight, blocks, rank, degree));
  assign_shard(up->bias, column_shard(up->bias, blocks, rank, degree));
  assign_shard(down->weight, row_shard(down->weight, rank, degree));
  tp_ = TensorParallelLink(parallel.tensor, parallel.sequence_parallel, name);
}

void GPTImpl::shard(const ModelParallel& parallel) {
  parallel_ = parallel;
  if (parallel.tensor_degree() == 1) {
    parallel_.tensor.reset();
    parallel_.sequence_parallel = false;
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    auto& block = blocks_[i];
    // Experts are split by expert, not by column: under tensor parallelism each rank of the
    // group routes the same tokens (or, sequence parallel, its slice of them).
    if (!block->moe.is_empty()) block->moe->shard(parallel_.expert);
    if (!parallel_.tensor) continue;
    block->attn->shard(parallel_, "block" + std::to_string(i) + ".attn");
    if (!block->mlp.is_empty()) block->mlp->shard(parallel_, "block" + std::to_string(i) + ".mlp");
  }
}

namespace {

// Column- and row-parallel weights (and column-parallel biases): each rank keeps its slice.
bool is_tensor_split(const std::string& key) {
  return key.find(".qkv.") != std::string::npos || key.find(".qkv_conv.") != std::string::npos ||
         key.find(".up.") != std::string::npos || key.find("proj.weight") != std::string::npos ||
         key.find("down.weight") != std::string::npos;
}
}  // namespace

std::vector<torch::Tensor> GPTImpl::partial_gradient_parameters() {
  std::vector<torch::Tensor> out;
  if (!parallel_.tensor) return out;
  for (const auto& item : named_parameters()) {
    const std::string& key = item.key();
    // QK-norm weights are shared by every head: each rank's gradient covers its own heads.
    const bool per_head = key.find("q_norm.") != std::string::npos || key.find("k_norm.") != std::string::npos;
    // Sequence parallel: what acts on the split sequence without being split itself (neither
    // the embeddings, before the split, nor a column- or row-parallel weight or column bias).
    const bool embedding = key.rfind("wte.", 0) == 0 || key.rfind("wpe.", 0) == 0;
    if (per_head || (parallel_.sequence_parallel && !embedding && !is_tensor_split(key)))
      out.push_back(item.value());
  }
  return out;
}

SplitParameters GPTImpl::split_parameters() {
  SplitParameters out;
  out.partial = partial_gradient_parameters();
  for (const auto& item : named_parameters()) {
    if (parallel_.tensor && is_tensor_split(item.key())) out.tensor_split.push_back(item.value());
  }
  if (parallel_.expert)
    for (auto& block : blocks_)
      if (!block->moe.is_empty())
        for (const auto& p : block->moe->expert_parameters()) out.experts.push_back(p);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> GPTImpl::gather_full_parameters() {
  torch::NoGradGuard no_grad;
  const int degree = parallel_.tensor_degree();
  // Row blocks of each column-parallel parameter, whole (each rank holds 1/degree of each).
  const std::vector<int64_t> qkv_rows{cfg_.hidden_size, key_value_width(cfg_), key_value_width(cfg_)};
  const std::vector<int64_t> up_rows(cfg_.activation == Activation::swiglu ? 2 : 1, ffn_hidden_size(cfg_));
  // Each block's experts, gathered over the expert-parallel group.
  std::map<std::string, torch::Tensor> experts;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i]->moe.is_empty()) continue;
    const std::string where = "block" + std::to_string(i) + ".moe";
    for (auto& [name, whole] : blocks_[i]->moe->gather_experts(where)) experts[where + "." + name] = std::move(whole);
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters()) {
    const std::string& key = item.key();
    torch::Tensor value = item.value().detach();
    if (const auto it = experts.find(key); it != experts.end()) {
      value = it->second;
    } else if (parallel_.tensor && is_tensor_split(key)) {
      const bool row_parallel = key.ends_with("proj.weight") || key.ends_with("down.weight");
      if (row_parallel) {  // each rank a contiguous range of columns
        value = parallel_.tensor->all_gather_rows(value.t().contiguous(), "all_gather.export." + key).t().contiguous();
      } else {  // each rank its slice of every row block: regroup block by block
        const auto& blocks = key.find(".up.") != std::string::npos ? up_rows : qkv_rows;
        std::vector<int64_t> local;
        for (const int64_t rows : blocks) local.push_back(rows / degree);
        const auto per_rank = parallel_.tensor->all_gather_rows(value, "all_gather.export." + key).chunk(degree, 0);
        std::vector<torch::Tensor> whole;
        for (size_t b = 0; b < blocks.size(); ++b)
          for (const auto& shard : per_rank) whole.push_back(shard.split_with_sizes(local, 0)[b]);
        value = torch::cat(whole, 0);
      }
    }
    out.emplace_back(key, value);
  }
  return out;
}

}  // namespace rcl
