// FSDP's units (workload/fsdp.hpp) in one process, over a group of one whose all-gather and
// reduce-scatter are copies: the sharded model computes the loss and gradients of the unsharded
// one bit for bit, with dropout and stochastic depth on (each block's recomputation draws its
// forward's masks and leaves the random stream where it was), and holds no full block parameter
// outside the block's own forward and backward. The collectives over real ranks, the loss
// trajectory against DDP and the memory between steps: test_sharded_data_parallel.cpp.
#include <algorithm>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/parallelize.hpp"
#include "rocm_conformance_llm/workload/fsdp.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

// One rank: gathering and reduce-scattering copy. Notes, at each all-gather, the full parameters
// resident just before it.
class OneRankGroup final : public ShardGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather(torch::Tensor& out, const torch::Tensor& in, const std::string& op) override {
    if (model) resident_before_gather.push_back(model->resident_parameter_bytes());
    ops.push_back(op);
    out.copy_(in);
  }
  void reduce_scatter_avg(torch::Tensor& out, const torch::Tensor& in, const std::string& op) override {
    ops.push_back(op);
    out.copy_(in);
  }
  const FsdpModel* model = nullptr;
  std::vector<int64_t> resident_before_gather;
  std::vector<std::string> ops;
};

TrainingConfig tiny_config() {
  TrainingConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_heads = 2;
  cfg.num_layers = 3;
  cfg.seq_len = 16;
  cfg.vocab_size = 29;
  cfg.dropout = 0.1;
  cfg.drop_path = 0.2;
  return testing::on_the_cpu(cfg);
}

// A unit's gradient as FsdpUnit lays it out: its decayed parameters' gradients first.
torch::Tensor unit_gradient(const std::vector<torch::Tensor>& params, const std::set<const void*>& decayed) {
  std::vector<torch::Tensor> first, rest;
  for (const auto& p : params) (decayed.count(p.unsafeGetTensorImpl()) ? first : rest).push_back(p.grad().reshape(-1));
  first.insert(first.end(), rest.begin(), rest.end());
  return torch::cat(first);
}

TEST(FsdpUnitTest, ShardedModelHasTheUnshardedLossAndGradientsWithDropoutOn) {
  const TrainingConfig cfg = tiny_config();
  torch::manual_seed(3);
  GPT reference(cfg);
  torch::manual_seed(3);
  GPT sharded(cfg);
  std::set<const void*> decayed;
  for (const auto& p : reference->decay_parameters()) decayed.insert(p.unsafeGetTensorImpl());
  std::vector<std::vector<torch::Tensor>> block_params;
  for (auto& block : reference->blocks()) block_params.push_back(block->parameters());
  int64_t largest_block_bytes = 0;
  for (auto& block : sharded->blocks()) {
    int64_t bytes = 0;
    for (const auto& p : block->parameters()) bytes += p.numel() * 4;
    largest_block_bytes = std::max(largest_block_bytes, bytes);
  }

  auto group = std::make_shared<OneRankGroup>();
  fully_shard(sharded, group);
  group->model = sharded->fsdp();
  FlatAdamW optimizer(sharded->fsdp()->decayed_shards(), sharded->fsdp()->plain_shards(), AdamWHyper{},
                      ShardOf{0, 1, /*given=*/true});
  EXPECT_EQ(sharded->fsdp()->resident_parameter_bytes(), 0);

  const auto tokens = torch::randint(cfg.vocab_size, {2, cfg.seq_len}, torch::kLong);
  const auto targets = torch::randint(cfg.vocab_size, {2, cfg.seq_len}, torch::kLong);
  // The same random stream for both: forward, backward, then one more draw.
  const auto run = [&](GPT& model) {
    torch::manual_seed(11);
    const auto loss = lm_loss(model->forward(tokens), targets);
    loss.backward();
    return std::make_pair(loss.detach(), torch::rand({4}));
  };
  const auto [reference_loss, reference_after] = run(reference);
  const auto [sharded_loss, sharded_after] = run(sharded);
  EXPECT_TRUE(torch::equal(sharded_loss, reference_loss));
  EXPECT_TRUE(torch::equal(sharded_after, reference_after)) << "the recomputation moved the random stream";
  sharded->fsdp()->reduce_scatter_root_gradients();

  // The optimizer's gradients, unit by unit: its decayed part of each, then the rest.
  const auto shards_decayed = sharded->fsdp()->decayed_shards();
  const auto shards_plain = sharded->fsdp()->plain_shards();
  for (size_t b = 0; b < block_params.size(); ++b) {
    const auto got = torch::cat({shards_decayed[b].grad(), shards_plain[b].grad()});
    EXPECT_TRUE(torch::equal(got, unit_gradient(block_params[b], decayed))) << "block " << b;
  }
  std::set<const void*> in_blocks;
  for (const auto& params : block_params)
    for (const auto& p : params) in_blocks.insert(p.unsafeGetTensorImpl());
  std::vector<torch::Tensor> root;
  for (const auto& p : reference->parameters())
    if (!in_blocks.count(p.unsafeGetTensorImpl())) root.push_back(p);
  EXPECT_TRUE(torch::equal(torch::cat({shards_decayed.back().grad(), shards_plain.back().grad()}),
                           unit_gradient(root, decayed)));

  // Each block was gathered for its forward and again for its backward, and reduce-scattered once;
  // before any gather no other block's parameters were held: at most the root's.
  for (int64_t b = 0; b < cfg.num_layers; ++b)
    for (const auto& op : {"all_gather.block" + std::to_string(b) + ".fwd",
                           "all_gather.block" + std::to_string(b) + ".bwd", "reduce_scatter.block" + std::to_string(b)})
      EXPECT_EQ(std::count(group->ops.begin(), group->ops.end(), op), 1) << op;
  const int64_t root_bytes = shards_decayed.back().numel() * 4 + shards_plain.back().numel() * 4;
  for (const int64_t bytes : group->resident_before_gather) EXPECT_LE(bytes, root_bytes);
  EXPECT_LT(root_bytes + largest_block_bytes, optimizer.flat_params().numel() * 4) << "a model too small to tell";
  sharded->fsdp()->end_step();
  EXPECT_EQ(sharded->fsdp()->resident_parameter_bytes(), 0);
}

// A forward without gradients (evaluation) gathers and frees as it goes, the root included.
TEST(FsdpUnitTest, EvaluationLeavesNoFullParametersResident) {
  const TrainingConfig cfg = tiny_config();
  GPT model(cfg);
  fully_shard(model, std::make_shared<OneRankGroup>());
  FlatAdamW optimizer(model->fsdp()->decayed_shards(), model->fsdp()->plain_shards(), AdamWHyper{},
                      ShardOf{0, 1, /*given=*/true});
  model->eval();
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(torch::zeros({1, cfg.seq_len}, torch::kLong));
  EXPECT_EQ(logits.size(-1), cfg.vocab_size);
  EXPECT_EQ(model->fsdp()->resident_parameter_bytes(), 0);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
