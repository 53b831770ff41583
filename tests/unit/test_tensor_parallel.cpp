// Tensor parallelism on real Gloo subgroups (ranks are threads of this process, one intra-op
// thread each): a run split 2 and 4 ways (with and without data parallelism beside it, with and
// without sequence parallelism) trains to the same losses as the unsplit model on the same
// tokens, its replicated weights stay equal across the tensor-parallel group, and its
// collectives are recorded under the group's name. The layout's world rules: a degree the world
// does not allow falls back (recorded), a world of one is a recorded no-op.
#include <chrono>
#include <mutex>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/parallelize.hpp"
#include "rocm_conformance_llm/transport/sharded_sync.hpp"
#include "rocm_conformance_llm/transport/subgroups.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"
#include "support/distributed.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

constexpr int kSteps = 4;
constexpr int64_t kBatchPerReplica = 2;
constexpr uint64_t kSeed = 7;

TrainingConfig small_model(const std::string& flavour) {
  TrainingConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_heads = 4;
  cfg.num_layers = 2;
  cfg.seq_len = 8;
  cfg.vocab_size = 24;
  cfg.batch_size = kBatchPerReplica;
  if (flavour.rfind("llama", 0) == 0) {  // every knob the split touches: fused gate/up, per-head norms, conv
    cfg.activation = Activation::swiglu;
    cfg.position = PositionEncoding::rotary;
    cfg.norm = NormKind::rmsnorm;
    cfg.qk_norm = true;
    cfg.qkv_conv_kernel = 3;
  }
  // Grouped-query attention: K and V blocks narrower than Q's, split at their own widths.
  if (flavour == "llama_gqa") cfg.num_key_value_heads = 2;
  return testing::on_the_cpu(cfg);
}

// The tokens replica `replica` of `replicas` trains on at `step` (the same on every rank of its
// tensor-parallel group).
torch::Tensor tokens(const TrainingConfig& cfg, int step, int replica) {
  auto gen = at::detail::createCPUGenerator(1000 + 17 * step + replica);
  return torch::randint(cfg.vocab_size, {cfg.batch_size, cfg.seq_len + 1}, gen, torch::kLong);
}

// The ranks are threads of one process: one at a time draws from the global generator.
GPT seeded_model(const TrainingConfig& cfg) {
  static std::mutex drawing;
  std::lock_guard<std::mutex> one_at_a_time(drawing);
  torch::manual_seed(kSeed);
  return GPT(cfg);
}

FlatAdamW optimizer_for(GPT& model) {
  return FlatAdamW(model->decay_parameters(), model->no_decay_parameters(), AdamWHyper{.weight_decay = 0.1});
}

double step_loss(GPT& model, const torch::Tensor& batch) {
  const auto loss =
      lm_loss(model->forward(batch.narrow(1, 0, batch.size(1) - 1)), batch.narrow(1, 1, batch.size(1) - 1));
  loss.backward();
  return loss.item<double>();
}

// The unsplit model on every replica's tokens at once: one mean over the whole batch is the
// mean of the replicas' equal-sized means, as the data-parallel average is.
std::vector<double> reference_losses(const TrainingConfig& cfg, int replicas, torch::ScalarType dtype) {
  torch::set_num_threads(1);
  GPT model = seeded_model(cfg);
  model->to(dtype);
  FlatAdamW opt = optimizer_for(model);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < replicas; ++r) parts.push_back(tokens(cfg, step, r));
    opt.zero_grad();
    losses.push_back(step_loss(model, torch::cat(parts)));
    opt.step(1e-2, torch::tensor(true));
  }
  return losses;
}

struct RankRun {
  std::vector<double> losses;
  bool replicated_equal = true;  // the replicated weights equal the group's rank 0's, bit for bit
  std::vector<std::string> ops;  // the collectives the tensor-parallel group recorded
};

// World `world`, tensor_parallel_degree as cfg says: every rank's losses (the data-parallel mean).
std::vector<RankRun> split_run(const TrainingConfig& cfg, int world, torch::ScalarType dtype) {
  std::vector<RankRun> runs(world);
  test::run_loopback_ranks(
      world,
      [&](const LaunchInfo& launch) {
        torch::set_num_threads(1);
        return std::shared_ptr<Communicator>(
            Communicator::connect(launch, torch::kCPU, std::chrono::milliseconds(20000)));
      },
      [&](std::shared_ptr<Communicator>& world_comm, int rank) {
        const ParallelLayout layout = plan_parallel_layout(cfg, world);
        Subgroups groups = make_subgroups(*world_comm, layout);
        auto data_group = make_data_parallel_group(*world_comm, layout);
        GPT model = seeded_model(cfg);
        const SplitParameters split = parallelize_split(model, groups.model_parallel());
        model->to(dtype);
        FlatAdamW opt = optimizer_for(model);
        const auto& partial = split.partial;
        const int replica = data_group->rank();
        for (int step = 0; step < kSteps; ++step) {
          opt.zero_grad();
          auto loss = torch::tensor(step_loss(model, tokens(cfg, step, replica)), torch::kDouble);
          if (groups.tensor) all_reduce_replicated_gradients(partial, *groups.tensor);
          auto grads = opt.flat_grads();
          data_group->all_reduce(grads, ReduceOp::avg, "dp_grads");
          data_group->all_reduce(loss, ReduceOp::avg, "dp_loss");
          runs[rank].losses.push_back(loss.item<double>());
          opt.step(1e-2, torch::tensor(true));
        }
        if (!groups.tensor) return;
        // Replicated parameters (embeddings, norms, row-parallel biases) must not drift apart.
        for (const auto& item : model->named_parameters()) {
          const std::string& key = item.key();
          const bool split = key.find(".qkv.") != std::string::npos || key.find(".qkv_conv.") != std::string::npos ||
                             key.find(".up.") != std::string::npos || key.find("proj.weight") != std::string::npos ||
                             key.find("down.weight") != std::string::npos;
          if (split) continue;
          torch::Tensor mine = item.value().detach().clone();
          torch::Tensor first = mine.clone();
          groups.tensor->communicator().broadcast(first, 0, "compare." + key);
          runs[rank].replicated_equal = runs[rank].replicated_equal && torch::equal(mine, first);
        }
        for (const auto& s : groups.tensor->take_samples()) runs[rank].ops.push_back(s.op);
      });
  return runs;
}

struct Case {
  std::string flavour;
  int world;
  int degree;
  bool sequence_parallel;
};

class TensorParallelTest : public ::testing::TestWithParam<Case> {};

// float64: the split sums each GEMM's products in another order than the whole model does, so
// the losses agree to rounding, 1e-9 relative after kSteps AdamW steps (float32: 1e-5).
TEST_P(TensorParallelTest, SameLossesAsTheUnsplitModel) {
  const Case c = GetParam();
  TrainingConfig cfg = small_model(c.flavour);
  cfg.tensor_parallel_degree = c.degree;
  cfg.sequence_parallel = c.sequence_parallel;
  validate(cfg);
  const ParallelLayout layout = plan_parallel_layout(cfg, c.world);
  ASSERT_EQ(layout.tensor_degree, c.degree);
  const auto expected = reference_losses(cfg, layout.data_degree, torch::kDouble);
  const auto runs = split_run(cfg, c.world, torch::kDouble);
  for (int r = 0; r < c.world; ++r) {
    ASSERT_EQ(runs[r].losses.size(), expected.size());
    for (size_t s = 0; s < expected.size(); ++s)
      EXPECT_NEAR(runs[r].losses[s], expected[s], 1e-9 * expected[s]) << "rank " << r << " step " << s + 1;
    EXPECT_TRUE(runs[r].replicated_equal) << "rank " << r;
    // The conjugate pairs' collectives, forward and backward, named by the group.
    const std::vector<std::string> expected_ops =
        c.sequence_parallel
            ? std::vector<std::string>{"tp:all_gather.block0.attn.in.fwd", "tp:reduce_scatter.block0.attn.in.bwd",
                                       "tp:reduce_scatter.block1.mlp.out.fwd", "tp:all_gather.block1.mlp.out.bwd",
                                       "tp:all_reduce.partial_grads"}
            : std::vector<std::string>{"tp:all_reduce.block0.attn.in.bwd", "tp:all_reduce.block1.mlp.out.fwd"};
    for (const auto& op : expected_ops)
      EXPECT_NE(std::find(runs[r].ops.begin(), runs[r].ops.end(), op), runs[r].ops.end()) << "rank " << r << ": " << op;
    for (const auto& op : runs[r].ops) EXPECT_EQ(op.rfind("tp:", 0), 0u) << op;
  }
  // The split is not a no-op that happens to agree: the first loss moved by training.
  EXPECT_GT(std::abs(expected.front() - expected.back()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Worlds, TensorParallelTest,
                         ::testing::Values(Case{"gpt2", 2, 2, false}, Case{"llama", 2, 2, false},
                                           Case{"gpt2", 4, 2, false}, Case{"llama", 4, 4, false},
                                           Case{"gpt2", 2, 2, true}, Case{"llama", 4, 2, true},
                                           Case{"llama_gqa", 2, 2, false}, Case{"llama_gqa", 4, 2, true}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return c.flavour + "_world" + std::to_string(c.world) + "_tp" + std::to_string(c.degree) +
                                  (c.sequence_parallel ? "_sp" : "");
                         });

TEST(TensorParallel, Float32LossesAgreeWithinTheDocumentedTolerance) {
  TrainingConfig cfg = small_model("llama");
  cfg.tensor_parallel_degree = 2;
  const auto expected = reference_losses(cfg, 1, torch::kFloat);
  const auto runs = split_run(cfg, 2, torch::kFloat);
  for (const auto& run : runs)
    for (size_t s = 0; s < expected.size(); ++s) EXPECT_NEAR(run.losses[s], expected[s], 1e-5 * expected[s]);
}

// A member that never joins its subgroup: the others' split fails after the timeout with a
// finding that names the group and the missing member, as the world's rendezvous does.
TEST(Subgroups, AMemberThatNeverJoinsIsNamedWithItsGroup) {
  std::vector<std::string> errors(2);
  test::run_loopback_ranks(
      2,
      [](const LaunchInfo& launch) {
        return std::shared_ptr<Communicator>(
            Communicator::connect(launch, torch::kCPU, std::chrono::milliseconds(2000)));
      },
      [&](std::shared_ptr<Communicator>& world, int rank) {
        if (rank == 1) return;  // never splits
        try {
          world->split("tp", {0, 1});
        } catch (const CollectiveError& e) {
          errors[rank] = e.what();
          EXPECT_EQ(e.finding().signature, "rendezvous_failed");
          EXPECT_EQ(e.finding().evidence.at("missing_ranks"), nlohmann::json::array({1}));
        }
      });
  EXPECT_NE(errors[0].find("subgroup 'tp (world ranks 0,1)'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("rank 1 (group rank 1) never"), std::string::npos) << errors[0];
}

TEST(ParallelLayout, AWorldThatDoesNotAllowTheDegreeFallsBackAndSaysSo) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.tensor_parallel_degree = 4;
  const ParallelLayout six = plan_parallel_layout(cfg, 6);
  EXPECT_EQ(six.tensor_degree, 2);
  EXPECT_EQ(six.data_degree, 3);
  ASSERT_EQ(six.notes.size(), 1u);
  EXPECT_NE(six.notes[0].find("tensor_parallel_degree=4"), std::string::npos) << six.notes[0];
  EXPECT_EQ(six.tensor_group(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(six.data_group(3), (std::vector<int>{1, 3, 5}));

  const ParallelLayout eight = plan_parallel_layout(cfg, 8);
  EXPECT_EQ(eight.tensor_degree, 4);
  EXPECT_TRUE(eight.notes.empty());
}

// The run plans its group once: the layout the world allows and the timeout every collective and
// the rendezvous wait for, in milliseconds.
// The plan also holds the model its layout trains: the comm mode's experts only where the world
// has data-parallel ranks to shard them over.
TEST(ParallelLayout, TheGroupPlanIsTheFittedLayoutTheTimeoutInMillisecondsAndTheModel) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.tensor_parallel_degree = 4;
  cfg.collective_timeout_s = 2.5;
  cfg.distributed_moe_experts = 4;
  const GroupPlan plan = plan_group(cfg, 6);
  EXPECT_EQ(plan.layout.tensor_degree, 2);
  EXPECT_EQ(plan.layout.notes, plan_parallel_layout(cfg, 6).notes);
  EXPECT_EQ(plan.collective_timeout, std::chrono::milliseconds(2500));
  TrainingConfig with_experts = cfg;
  with_experts.moe_experts = 4;
  EXPECT_EQ(plan.model, with_experts);
  EXPECT_EQ(plan_group(cfg, 1).model, cfg);  // one rank: the dense MLP kept
}

TEST(ParallelLayout, AWorldOfOneIsARecordedNoOp) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.tensor_parallel_degree = 2;
  cfg.sequence_parallel = true;
  cfg.moe_experts = 4;
  const ParallelLayout one = plan_parallel_layout(cfg, 1);
  EXPECT_EQ(one.tensor_degree, 1);
  EXPECT_EQ(one.expert_degree, 1);
  EXPECT_FALSE(one.sequence_parallel);
  EXPECT_EQ(one.notes.size(), 3u);  // the degree, sequence parallel off, every expert local
  const auto recorded = to_json(one);
  EXPECT_EQ(recorded.at("tensor_parallel_degree"), 1);
  EXPECT_EQ(recorded.at("notes").size(), 3u);
}

TEST(ParallelLayout, ExpertsShardOverTheDataParallelRanksTheyDivide) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.moe_experts = 6;
  const ParallelLayout four = plan_parallel_layout(cfg, 4);
  EXPECT_EQ(four.expert_degree, 2);  // gcd(6, 4)
  EXPECT_EQ(four.expert_group(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(four.notes.size(), 1u);
  cfg.tensor_parallel_degree = 2;
  const ParallelLayout tp = plan_parallel_layout(cfg, 4);
  EXPECT_EQ(tp.expert_degree, 2);
  EXPECT_EQ(tp.expert_group(1), (std::vector<int>{1, 3}));  // its data-parallel group
  EXPECT_TRUE(tp.notes.empty());
}

// A degree the model does not allow is fitted like one the world does not allow: the largest
// that both allow, recorded (a stress mode raising the degree never invalidates a model).
TEST(ParallelLayout, ADegreeTheModelDoesNotAllowIsFittedAndRecorded) {
  TrainingConfig cfg = small_model("gpt2");  // 4 heads
  cfg.tensor_parallel_degree = 3;
  EXPECT_NO_THROW(validate(cfg));
  const ParallelLayout three = plan_parallel_layout(cfg, 3);
  EXPECT_EQ(three.tensor_degree, 1);
  ASSERT_EQ(three.notes.size(), 1u);
  EXPECT_NE(three.notes[0].find("does not divide num_heads=4"), std::string::npos) << three.notes[0];
  cfg.tensor_parallel_degree = 4;
  cfg.sequence_parallel = true;
  cfg.seq_len = 6;
  EXPECT_EQ(plan_parallel_layout(cfg, 4).tensor_degree, 2);  // seq_len 6: 2 of the 4
  cfg.seq_len = 8;
  EXPECT_EQ(plan_parallel_layout(cfg, 4).tensor_degree, 4);
}

TEST(ParallelLayout, ConfigRefusesWhatNoLayoutFixes) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.moe_experts = 2;
  cfg.moe_top_k = 3;
  EXPECT_THROW(validate(cfg), ConfigError);
  cfg.moe_experts = 0;
  cfg.distributed_moe_experts = 2;
  EXPECT_THROW(validate(cfg), ConfigError);
}

// distributed_moe_experts (the comm mode's): experts only where moe_experts is 0 and several
// data-parallel ranks shard them; one rank (or a world all tensor parallel) keeps the dense model.
TEST(ParallelLayout, DistributedExpertsApplyOnlyWithSeveralDataParallelRanks) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.distributed_moe_experts = 4;
  const ParallelLayout one = plan_parallel_layout(cfg, 1);
  EXPECT_EQ(one.moe_experts, 0);
  ASSERT_EQ(one.notes.size(), 1u);
  EXPECT_NE(one.notes[0].find("the dense MLP kept"), std::string::npos) << one.notes[0];
  const ParallelLayout two = plan_parallel_layout(cfg, 2);
  EXPECT_EQ(two.moe_experts, 4);
  EXPECT_EQ(two.expert_degree, 2);
  cfg.tensor_parallel_degree = 2;
  EXPECT_EQ(plan_parallel_layout(cfg, 2).moe_experts, 0);  // one data-parallel rank
  EXPECT_EQ(plan_parallel_layout(cfg, 4).expert_degree, 2);
  cfg.moe_experts = 6;  // asked for: wins, whatever the world
  EXPECT_EQ(plan_parallel_layout(cfg, 1).moe_experts, 6);
}

// distributed_tensor_parallel_degree (the comm mode's): a split only where two or more
// data-parallel replicas remain beside it, so a world of two keeps ZeRO's and the experts'
// collectives; an explicit tensor_parallel_degree wins.
TEST(ParallelLayout, DistributedTensorSplitKeepsTwoDataParallelReplicas) {
  TrainingConfig cfg = small_model("gpt2");  // 4 heads
  cfg.distributed_tensor_parallel_degree = 2;
  for (const int world : {1, 2, 3}) {
    const ParallelLayout layout = plan_parallel_layout(cfg, world);
    EXPECT_EQ(layout.tensor_degree, 1) << world;
    ASSERT_EQ(layout.notes.size(), 1u) << world;
    EXPECT_NE(layout.notes[0].find("no tensor split"), std::string::npos) << layout.notes[0];
  }
  EXPECT_EQ(plan_parallel_layout(cfg, 4).tensor_degree, 2);
  EXPECT_EQ(plan_parallel_layout(cfg, 4).data_degree, 2);
  EXPECT_EQ(plan_parallel_layout(cfg, 6).tensor_degree, 2);
  cfg.distributed_tensor_parallel_degree = 4;
  EXPECT_EQ(plan_parallel_layout(cfg, 4).tensor_degree, 2);  // 4 would leave one replica
  EXPECT_EQ(plan_parallel_layout(cfg, 8).tensor_degree, 4);
  cfg.tensor_parallel_degree = 2;  // asked for: wins, even in a world of two
  EXPECT_EQ(plan_parallel_layout(cfg, 2).tensor_degree, 2);
}

// FSDP's units are whole dense blocks: on several ranks the comm mode's tensor split and experts
// (tensor_parallel_degree, distributed_moe_experts) leave the model whole, each with its note, so
// the mode composes with fsdp; on one rank (FSDP a no-op) they resolve as without it.
TEST(ParallelLayout, FsdpKeepsTheModelWholeAndSaysWhy) {
  TrainingConfig cfg = small_model("gpt2");
  cfg.data_parallel = DataParallel::fsdp;
  cfg.tensor_parallel_degree = 2;
  cfg.distributed_moe_experts = 4;
  const ParallelLayout four = plan_parallel_layout(cfg, 4);
  EXPECT_EQ(four.tensor_degree, 1);
  EXPECT_EQ(four.data_degree, 4);
  EXPECT_EQ(four.moe_experts, 0);
  EXPECT_EQ(four.expert_degree, 1);
  ASSERT_EQ(four.notes.size(), 2u);
  cfg.tensor_parallel_degree = 1;
  cfg.distributed_tensor_parallel_degree = 2;
  EXPECT_EQ(plan_parallel_layout(cfg, 4).tensor_degree, 1);
  EXPECT_NE(four.notes[0].find("with data_parallel fsdp"), std::string::npos) << four.notes[0];
  EXPECT_NE(four.notes[1].find("the dense MLP kept"), std::string::npos) << four.notes[1];
  cfg.data_parallel = DataParallel::zero;
  const ParallelLayout zero = plan_parallel_layout(cfg, 4);
  EXPECT_EQ(zero.tensor_degree, 2);
  EXPECT_EQ(zero.moe_experts, 4);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
