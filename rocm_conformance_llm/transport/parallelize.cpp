#include "rocm_conformance_llm/transport/parallelize.hpp"

#include <map>
#include <set>
#include <stdexcept>

namespace rcl {
namespace {

// Row blocks of the fused Q/K/V weight: Q, then K and V (narrower under grouped-query attention).
std::vector<int64_t> qkv_row_blocks(const TrainingConfig& cfg) {
  return {cfg.hidden_size, key_value_width(cfg), key_value_width(cfg)};
}

// Row blocks of the MLP's up weight: gate and up for SwiGLU, each split the same way.
std::vector<int64_t> up_row_blocks(const TrainingConfig& cfg) {
  return std::vector<int64_t>(cfg.activation == Activation::swiglu ? 2 : 1, ffn_hidden_size(cfg));
}

// Column- and row-parallel weights (and column-parallel biases): each rank keeps its slice.
bool is_tensor_split(const std::string& key) {
  return key.find(".qkv.") != std::string::npos || key.find(".qkv_conv.") != std::string::npos ||
         key.find(".up.") != std::string::npos || key.find("proj.weight") != std::string::npos ||
         key.find("down.weight") != std::string::npos;
}

void split_attention(CausalSelfAttentionImpl& attn, const TrainingConfig& cfg, const ModelParallel& parallel,
                     const std::string& name) {
  const int degree = parallel.tensor_degree(), rank = parallel.tensor_rank();
  TORCH_CHECK(cfg.num_heads % degree == 0, "tensor parallel: ", cfg.num_heads, " heads do not split over ", degree);
  TORCH_CHECK(key_value_heads(cfg) % degree == 0, "tensor parallel: ", key_value_heads(cfg),
              " key/value heads do not split over ", degree);
  // Heads are consecutive rows in each of Q, K and V, so each rank keeps whole query groups.
  const auto blocks = qkv_row_blocks(cfg);
  assign_shard(attn.qkv->weight, column_shard(attn.qkv->weight, blocks, rank, degree));
  assign_shard(attn.qkv->bias, column_shard(attn.qkv->bias, blocks, rank, degree));
  if (!attn.qkv_conv.is_empty()) {
    // Depthwise: one filter per Q/K/V channel, so the channels split with the heads.
    auto& conv = *attn.qkv_conv;
    assign_shard(conv.weight, column_shard(conv.weight, blocks, rank, degree));
    conv.options.in_channels(conv.weight.size(0)).out_channels(conv.weight.size(0)).groups(conv.weight.size(0));
  }
  assign_shard(attn.proj->weight, row_shard(attn.proj->weight, rank, degree));
  attn.use_tensor_parallel(TensorParallelLink(parallel.tensor, parallel.sequence_parallel, name), degree);
}

void split_mlp(MlpImpl& mlp, const TrainingConfig& cfg, const ModelParallel& parallel, const std::string& name) {
  const int degree = parallel.tensor_degree(), rank = parallel.tensor_rank();
  const auto blocks = up_row_blocks(cfg);
  assign_shard(mlp.up->weight, column_shard(mlp.up->weight, blocks, rank, degree));
  assign_shard(mlp.up->bias, column_shard(mlp.up->bias, blocks, rank, degree));
  assign_shard(mlp.down->weight, row_shard(mlp.down->weight, rank, degree));
  mlp.use_tensor_parallel(TensorParallelLink(parallel.tensor, parallel.sequence_parallel, name));
}

// Replicated parameters whose gradient on each rank of the tensor-parallel group is only its
// share: the QK-norm weights (each rank's heads) and, with sequence parallelism, the norms and
// row-parallel biases (each rank's slice of the sequence). Their gradients are summed over the
// group (all_reduce_replicated_gradients) before the data-parallel average.
std::vector<torch::Tensor> partial_gradient_parameters(GPT& model) {
  std::vector<torch::Tensor> out;
  const ModelParallel& parallel = model->parallel();
  if (!parallel.tensor) return out;
  for (const auto& item : model->named_parameters()) {
    const std::string& key = item.key();
    // QK-norm weights are shared by every head: each rank's gradient covers its own heads.
    const bool per_head = key.find("q_norm.") != std::string::npos || key.find("k_norm.") != std::string::npos;
    // Sequence parallel: what acts on the split sequence without being split itself (neither
    // the embeddings, before the split, nor a column- or row-parallel weight or column bias).
    const bool embedding = key.rfind("wte.", 0) == 0 || key.rfind("wpe.", 0) == 0;
    if (per_head || (parallel.sequence_parallel && !embedding && !is_tensor_split(key))) out.push_back(item.value());
  }
  return out;
}

// A tensor-parallel parameter whole: each rank's slice gathered over the tensor group.
torch::Tensor gather_tensor_split(const std::string& key, const torch::Tensor& mine, const TrainingConfig& cfg,
                                  ModelParallelGroup& tensor) {
  const std::string op = "all_gather.export." + key;
  const bool row_parallel = key.ends_with("proj.weight") || key.ends_with("down.weight");
  if (row_parallel)  // each rank a contiguous range of columns
    return tensor.all_gather_rows(mine.t().contiguous(), op).t().contiguous();
  // Column-parallel: each rank its slice of every row block; regroup block by block.
  const int degree = tensor.size();
  const auto blocks = key.find(".up.") != std::string::npos ? up_row_blocks(cfg) : qkv_row_blocks(cfg);
  std::vector<int64_t> local;
  for (const int64_t rows : blocks) local.push_back(rows / degree);
  const auto per_rank = tensor.all_gather_rows(mine, op).chunk(degree, 0);
  std::vector<torch::Tensor> whole;
  for (size_t b = 0; b < blocks.size(); ++b)
    for (const auto& shard : per_rank) whole.push_back(shard.split_with_sizes(local, 0)[b]);
  return torch::cat(whole, 0);
}

}  // namespace

std::unique_ptr<FlatAdamW> ParallelizedModel::make_optimizer(AdamWHyper hyper) const {
  auto optimizer = std::make_unique<FlatAdamW>(decayed, plain, hyper, optimizer_shard, experts);
  if (norm_weights) optimizer->weigh_norm(norm_weights(optimizer->parameters()));
  return optimizer;
}

ParallelizedModel optimizer_parameters(GPT& model) {
  if (const FsdpModel* fsdp = model->fsdp()) return {.decayed = fsdp->decayed_shards(), .plain = fsdp->plain_shards()};
  return {.decayed = model->decay_parameters(), .plain = model->no_decay_parameters()};
}

void parallelize_tensor(GPT& model, const ModelParallel& parallel) {
  const auto& cfg = model->config();
  for (size_t i = 0; i < model->blocks().size(); ++i) {
    auto& block = model->blocks()[i];
    const std::string where = "block" + std::to_string(i);
    split_attention(*block->attn, cfg, parallel, where + ".attn");
    // Experts are split by expert, not by column: under tensor parallelism each rank of the
    // group routes the same tokens (or, sequence parallel, its slice of them).
    if (!block->mlp.is_empty()) split_mlp(*block->mlp, cfg, parallel, where + ".mlp");
  }
}

void parallelize_experts(GPT& model, const std::shared_ptr<ModelParallelGroup>& experts) {
  for (auto& block : model->blocks())
    if (!block->moe.is_empty()) block->moe->shard(experts);
}

SplitParameters parallelize_split(GPT& model, ModelParallel parallel) {
  if (parallel.tensor_degree() == 1) {
    parallel.tensor.reset();
    parallel.sequence_parallel = false;
  }
  model->set_parallel(parallel);
  parallelize_experts(model, parallel.expert);
  if (parallel.tensor) parallelize_tensor(model, parallel);
  return split_parameters(model);
}

FsdpModel& fully_shard(GPT& model, std::shared_ptr<ShardGroup> group) {
  if (model->fsdp()) throw std::logic_error("fully_shard: the model is sharded already");
  // Weight decay applies to what it applies to unsharded (GPTImpl::decay_parameters).
  std::set<const void*> decayed;
  for (const auto& p : model->decay_parameters()) decayed.insert(p.unsafeGetTensorImpl());
  const auto unit = [&](const std::string& name, const std::vector<torch::Tensor>& params) {
    std::vector<torch::Tensor> dec, plain;
    for (const auto& p : params) (decayed.count(p.unsafeGetTensorImpl()) ? dec : plain).push_back(p);
    return std::make_shared<FsdpUnit>(name, dec, plain, group);
  };
  std::set<const void*> in_blocks;
  std::vector<FsdpBlock> blocks;
  for (size_t i = 0; i < model->blocks().size(); ++i) {
    Block block = model->blocks()[i];
    const auto params = block->parameters();
    for (const auto& p : params) in_blocks.insert(p.unsafeGetTensorImpl());
    blocks.push_back({unit("block" + std::to_string(i), params),
                      [block](const torch::Tensor& x) mutable { return block->forward(x); }});
  }
  std::vector<torch::Tensor> root;
  for (const auto& p : model->parameters())
    if (!in_blocks.count(p.unsafeGetTensorImpl())) root.push_back(p);
  auto root_unit = unit("root", root);
  model->set_fully_sharded(std::make_shared<FsdpModel>(std::move(blocks), std::move(root_unit)));
  return *model->fsdp();
}

SplitParameters split_parameters(GPT& model) {
  SplitParameters out;
  const ModelParallel& parallel = model->parallel();
  out.partial = partial_gradient_parameters(model);
  for (const auto& item : model->named_parameters())
    if (parallel.tensor && is_tensor_split(item.key())) out.tensor_split.push_back(item.value());
  if (parallel.expert)
    for (auto& block : model->blocks())
      if (!block->moe.is_empty())
        for (const auto& p : block->moe->expert_parameters()) out.experts.push_back(p);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> gather_full_parameters(GPT& model) {
  torch::NoGradGuard no_grad;
  const ModelParallel& parallel = model->parallel();
  // Each block's experts, gathered over the expert-parallel group.
  std::map<std::string, torch::Tensor> experts;
  for (size_t i = 0; i < model->blocks().size(); ++i) {
    auto& block = model->blocks()[i];
    if (block->moe.is_empty()) continue;
    const std::string where = "block" + std::to_string(i) + ".moe";
    for (auto& [name, whole] : block->moe->gather_experts(where)) experts[where + "." + name] = std::move(whole);
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model->named_parameters()) {
    const std::string& key = item.key();
    torch::Tensor value = item.value().detach();
    if (const auto it = experts.find(key); it != experts.end()) value = it->second;
    else if (parallel.tensor && is_tensor_split(key))
      value = gather_tensor_split(key, value, model->config(), *parallel.tensor);
    out.emplace_back(key, value);
  }
  return out;
}

}  // namespace rcl
