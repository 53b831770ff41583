// The mixture-of-experts feed-forward with its experts sharded over 2 and 4 ranks (real Gloo
// subgroups, ranks as threads) against the same layer with every expert local, fed the same
// tokens: outputs, input and router gradients equal; each rank holds only its experts, whose
// gradients equal the sum of the local layers' gradients over the ranks (the dispatch and combine
// all-to-alls, forward and backward), and gathered they are the whole layer's. Routing is uneven:
// ranks send different counts to each expert.
#include <chrono>
#include <mutex>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/subgroups.hpp"
#include "support/distributed.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TrainingConfig moe_config(const std::string& activation, int64_t experts, int64_t top_k) {
  TrainingConfig cfg;
  cfg.hidden_size = 16;
  cfg.num_heads = 2;
  cfg.num_layers = 2;
  cfg.seq_len = 12;
  cfg.vocab_size = 24;
  cfg.activation = *parse_name<Activation>(activation);
  cfg.moe_experts = experts;
  cfg.moe_top_k = top_k;
  return testing::on_the_cpu(cfg);
}

// The ranks are threads of one process: one at a time draws from the global generator.
MoeFeedForward seeded_layer(const TrainingConfig& cfg) {
  static std::mutex drawing;
  std::lock_guard<std::mutex> one_at_a_time(drawing);
  torch::manual_seed(11);
  MoeFeedForward layer(cfg);
  layer->to(torch::kDouble);
  return layer;
}

struct Case {
  std::string activation;
  int world;
  int64_t experts;
  int64_t top_k;
};

class MoeExpertParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertParallelTest, ShardedExpertsMatchEveryExpertLocal) {
  const Case c = GetParam();
  const TrainingConfig cfg = moe_config(c.activation, c.experts, c.top_k);
  validate(cfg);
  std::vector<std::vector<std::string>> problems(c.world);
  std::vector<std::vector<int64_t>> sent(c.world);  // tokens each rank routed to each expert
  std::vector<std::vector<std::string>> ops(c.world);
  test::run_loopback_ranks(
      c.world,
      [&](const LaunchInfo& launch) {
        torch::set_num_threads(1);
        return std::shared_ptr<Communicator>(
            Communicator::connect(launch, torch::kCPU, std::chrono::milliseconds(20000)));
      },
      [&](std::shared_ptr<Communicator>& world, int rank) {
        const ParallelLayout layout = plan_parallel_layout(cfg, c.world);
        Subgroups groups = make_subgroups(*world, layout);
        if (!groups.expert) {
          problems[rank].push_back("no expert-parallel group");
          return;
        }
        MoeFeedForward local = seeded_layer(cfg);
        MoeFeedForward sharded = seeded_layer(cfg);
        sharded->shard(groups.expert);

        auto gen = at::detail::createCPUGenerator(100 + rank);  // each rank its own tokens
        const auto x = torch::randn({3, cfg.seq_len, cfg.hidden_size}, gen, torch::kDouble);
        const auto upstream = torch::randn({3, cfg.seq_len, cfg.hidden_size}, gen, torch::kDouble);
        const auto x_local = x.clone().requires_grad_(true);
        const auto x_sharded = x.clone().requires_grad_(true);
        const auto y_local = local->forward(x_local);
        const auto y_sharded = sharded->forward(x_sharded);
        (y_local * upstream).sum().backward();
        (y_sharded * upstream).sum().backward();

        const auto close = [&](const std::string& what, const torch::Tensor& got, const torch::Tensor& want) {
          if (!torch::allclose(got, want, 1e-10, 1e-12))
            problems[rank].push_back(what + " differs by " + std::to_string((got - want).abs().max().item<double>()));
        };
        close("output", y_sharded, y_local);
        close("input gradient", x_sharded.grad(), x_local.grad());
        close("router gradient", sharded->router->weight.grad(), local->router->weight.grad());
        // The rank holds only its experts, and each one's gradient covers every rank's tokens: the
        // sum of the local layers' gradients over the ranks, for that expert.
        const int64_t per_rank = c.experts / c.world;
        EXPECT_EQ(sharded->local_experts(), per_rank);
        const auto local_params = local->expert_parameters();
        const auto sharded_params = sharded->expert_parameters();
        for (size_t i = 0; i < local_params.size(); ++i) {
          auto summed = local_params[i].grad().clone();
          world->all_reduce_sum(summed, "reference_grads");
          EXPECT_EQ(sharded_params[i].numel() * c.world, local_params[i].numel()) << "expert parameter " << i;
          close("expert values " + std::to_string(i), sharded_params[i],
                local_params[i].narrow(0, rank * per_rank, per_rank));
          close("expert gradient " + std::to_string(i), sharded_params[i].grad(),
                summed.narrow(0, rank * per_rank, per_rank));
        }
        // The export gathers every rank's experts back into the whole layer's, in expert order.
        for (const auto& [name, whole] : sharded->gather_experts("test")) {
          const auto want = local->named_parameters(/*recurse=*/false)[name];
          close("gathered " + name, whole, want);
        }
        const auto counts = sharded->last_tokens_per_expert();
        sent[rank] = {counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel()};
        for (const auto& s : groups.expert->take_samples()) ops[rank].push_back(s.op);
      });
  for (int r = 0; r < c.world; ++r)
    for (const auto& p : problems[r]) ADD_FAILURE() << "rank " << r << ": " << p;
  // Uneven: the ranks did not all send the same counts, and no rank sent every expert the same.
  bool ranks_differ = false;
  for (int r = 1; r < c.world; ++r) ranks_differ |= sent[r] != sent[0];
  EXPECT_TRUE(ranks_differ);
  for (int r = 0; r < c.world; ++r) {
    EXPECT_NE(*std::min_element(sent[r].begin(), sent[r].end()), *std::max_element(sent[r].begin(), sent[r].end()));
    for (const std::string op :
         {"ep:all_to_all.moe_counts", "ep:all_to_all.moe_dispatch.fwd", "ep:all_to_all.moe_combine.fwd",
          "ep:all_to_all.moe_combine.bwd", "ep:all_to_all.moe_dispatch.bwd"})
      EXPECT_NE(std::find(ops[r].begin(), ops[r].end(), op), ops[r].end()) << "rank " << r << ": " << op;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, MoeExpertParallelTest,
                         ::testing::Values(Case{"gelu", 2, 4, 2}, Case{"swiglu", 2, 6, 1}, Case{"gelu", 4, 4, 2},
                                           Case{"swiglu", 4, 8, 3}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return c.activation + "_world" + std::to_string(c.world) + "_experts" +
                                  std::to_string(c.experts) + "_top" + std::to_string(c.top_k);
                         });

// With one expert and top-1 the router's weight is 1 and the layer is a dense MLP.
TEST(Moe, OneExpertTopOneIsTheDenseMlp) {
  TrainingConfig cfg = moe_config("gelu", 1, 1);
  MoeFeedForward moe = seeded_layer(cfg);
  Mlp mlp(cfg);
  mlp->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    mlp->up->weight.copy_(moe->w_up[0]);
    mlp->up->bias.copy_(moe->b_up[0]);
    mlp->down->weight.copy_(moe->w_down[0]);
    mlp->down->bias.copy_(moe->b_down[0]);
  }
  const auto x = torch::randn({2, cfg.seq_len, cfg.hidden_size}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(moe->forward(x), mlp->forward(x), 1e-12, 1e-14));
}

TEST(Moe, TheModelCountsAndTrainsItsExperts) {
  TrainingConfig cfg = moe_config("swiglu", 4, 2);
  torch::manual_seed(3);
  GPT model(cfg);
  int64_t total = 0;
  for (const auto& p : model->parameters()) total += p.numel();
  EXPECT_EQ(total, parameter_count(cfg));
  const auto tokens = torch::randint(cfg.vocab_size, {2, cfg.seq_len + 1}, torch::kLong);
  const auto loss = lm_loss(model->forward(tokens.narrow(1, 0, cfg.seq_len)), tokens.narrow(1, 1, cfg.seq_len));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_GT(model->blocks()[0]->moe->w_down.grad().abs().sum().item<double>(), 0.0);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
