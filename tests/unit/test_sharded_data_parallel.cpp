// Sharded data parallel (training.data_parallel) on real c10d groups over loopback (ranks are
// threads of this process, Gloo): ZeRO's and FSDP's loss trajectories are DDP's for the same seed
// and data, at 2 and 4 ranks, fp32 and bf16, with and without gradient clipping; each rank keeps
// only its shard of the optimizer state (FSDP: of the parameters too); the collectives each
// issues are recorded; and in a world of one ZeRO is DDP exactly.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/transport/process_group_sync.hpp"
#include "support/distributed.hpp"
#include "support/resolved_config.hpp"
#include "support/step_recorder.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

constexpr int64_t kSteps = 20;
constexpr int kGlobalBatch = 8;

RunContext tiny_run(int world, const std::string& precision, double grad_clip) {
  RunContext ctx;
  auto& c = ctx.cfg;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.num_layers = 2;
  c.seq_len = 32;
  c.batch_size = kGlobalBatch / world;
  c.steps = kSteps;
  c.warmup_steps = 2;
  c.eval_interval = 0;
  c.checksum_interval = 0;
  c.device = DeviceChoice::cpu;
  c.mixed_precision = *parse_name<Precision>(precision);
  c.grad_clip = grad_clip;
  c.learning_rate = 3e-3;  // large enough that a wrong shard or a missed gather shows in the loss
  c = testing::on_the_cpu(c);
  return ctx;
}

using Recorder = test::StepRecorder;

struct RankResult {
  std::vector<StepRecord> records;
  torch::Tensor params;                  // the flat parameters at the end
  int64_t moments = 0;                   // elements of AdamW's first moment this rank keeps
  int64_t resident_parameter_bytes = 0;  // FSDP: full block and root parameters held after the run
  int64_t shard_bytes = 0;               // FSDP: this rank's shards
};

// `world` ranks train `ctx` with `data_parallel`; every rank's records and final state.
std::vector<RankResult> train(const RunContext& base, int world, const std::string& data_parallel) {
  RunContext ctx = base;
  ctx.cfg.data_parallel = *parse_name<DataParallel>(data_parallel);
  std::vector<RankResult> out(world);
  std::mutex building;  // weight init draws from the process-wide generator: one Trainer at a time
  test::run_loopback_ranks(
      world,
      [&](const LaunchInfo& launch) {
        return std::shared_ptr<GradientSync>(
            make_gradient_sync(launch, plan_group(ctx.cfg, launch.world_size), ctx.cfg, torch::kCPU));
      },
      [&](std::shared_ptr<GradientSync>& sync, int rank) {
        std::unique_ptr<Trainer> trainer;
        {
          std::lock_guard lock(building);
          trainer = std::make_unique<Trainer>(ctx, sync);
        }
        Recorder recorder;
        trainer->add_observer(&recorder);
        trainer->run();
        out[rank].records = recorder.records;
        // FSDP: what a rank holds between steps, then the whole model gathered to compare it.
        FsdpModel* fsdp = trainer->model()->fsdp();
        if (fsdp) {
          out[rank].resident_parameter_bytes = fsdp->resident_parameter_bytes();
          out[rank].shard_bytes = fsdp->shard_bytes();
          fsdp->gather_all();
        }
        std::vector<torch::Tensor> flat;
        for (const auto& p : trainer->model()->parameters()) flat.push_back(p.detach().reshape(-1).clone());
        out[rank].params = torch::cat(flat);
        if (fsdp) fsdp->release_all();
        out[rank].moments = static_cast<LoopAccess&>(*trainer).snapshot().optimizer.exp_avg.numel();
      });
  return out;
}

std::vector<double> losses_of(const RankResult& r) {
  std::vector<double> out;
  for (const auto& rec : r.records) out.push_back(rec.loss);
  return out;
}

// (world, precision, grad_clip)
class ShardedTrajectoryTest : public ::testing::TestWithParam<std::tuple<int, std::string, double>> {};

// Every rank of `sharded` logs DDP's losses: bit for bit where `bitwise`, otherwise within the
// precision's tolerance (bf16 autocast rounds the weights to 8 bits of mantissa in every matmul: a
// last-bit difference in a weight, the clipped norm's, flips a rounding now and then, and the
// trajectories drift further apart than fp32's: measured up to 2.5e-5 relative at step 20, 4
// ranks). Every rank then holds the same whole model. Returns the largest relative difference.
double expect_losses_follow_ddp(const std::vector<RankResult>& ddp, const std::vector<RankResult>& sharded,
                                const std::string& precision, bool bitwise) {
  const auto reference = losses_of(ddp[0]);
  EXPECT_EQ(reference.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(reference.back(), reference.front() - 0.5) << "the DDP run did not train";
  const double tolerance = precision == "bf16" ? 1e-4 : 2e-6;
  double worst = 0;
  for (size_t r = 0; r < sharded.size(); ++r) {
    const auto trajectory = losses_of(sharded[r]);
    EXPECT_EQ(trajectory.size(), reference.size()) << "rank " << r;
    for (size_t i = 0; i < std::min(trajectory.size(), reference.size()); ++i) {
      worst = std::max(worst, std::abs(trajectory[i] - reference[i]) / reference[i]);
      if (bitwise) EXPECT_EQ(trajectory[i], reference[i]) << "rank " << r << " step " << i + 1;
      else EXPECT_NEAR(trajectory[i], reference[i], tolerance * reference[i]) << "rank " << r << " step " << i + 1;
    }
    EXPECT_TRUE(torch::equal(sharded[r].params, sharded[0].params)) << "rank " << r;
  }
  if (bitwise) EXPECT_TRUE(torch::equal(sharded[0].params, ddp[0].params));
  return worst;
}

// ZeRO reduce-scatters what DDP all-reduces and updates each shard with the same element-wise
// AdamW, so only two things can differ, both summation order: Gloo's ring sums one whole buffer
// for the reduce-scatter and DDP's 25 MB buckets for the all-reduce (same order for 2 ranks,
// where a + b = b + a; another order for 4), and the clipped norm is sqrt(sum over ranks of the
// shards' sums of squares) instead of one norm over the buffer. Where neither applies (2 ranks,
// no clipping) they are bit for bit equal, in fp32 and bf16; otherwise within the tolerance below.
TEST_P(ShardedTrajectoryTest, ZeroFollowsDdp) {
  const auto [world, precision, clip] = GetParam();
  const RunContext ctx = tiny_run(world, precision, clip);
  const auto ddp = train(ctx, world, "ddp");
  const auto zero = train(ctx, world, "zero");
  // After the all-gather every rank holds the same whole model: the cross-rank checksum applies.
  const double worst = expect_losses_follow_ddp(ddp, zero, precision, world == 2 && clip == 0.0);
  int64_t total = 0;
  for (const auto& p : Trainer(ctx).model()->parameters()) total += p.numel();
  for (int r = 0; r < world; ++r) {
    // Each rank keeps AdamW moments for its shard only: the padded total split world ways.
    EXPECT_EQ(zero[r].moments, (total + world - 1) / world) << "rank " << r;
    EXPECT_EQ(ddp[r].moments, total) << "rank " << r;
  }
  RecordProperty("max_relative_loss_difference", fmt::format("{:.3g}", worst));
  std::cout << "ZeRO vs DDP, largest relative loss difference over " << kSteps << " steps: " << worst << "\n";
}

// FSDP computes each block's gradients from a recomputation of its forward (the same ops on the
// same inputs: the same values) and reduce-scatters them per block, with the AVG of Gloo's route
// (SUM, then divided by the world size, as DDP divides); AdamW is element-wise. So what differs
// is again summation order only: the reduce-scatter's ring against DDP's bucketed all-reduce (the
// same for 2 ranks), and the clipped norm summed over the ranks' shards of each unit. Bit for bit
// at 2 ranks without clipping; otherwise within ZeRO's tolerances.
TEST_P(ShardedTrajectoryTest, FsdpFollowsDdp) {
  const auto [world, precision, clip] = GetParam();
  const RunContext ctx = tiny_run(world, precision, clip);
  const auto ddp = train(ctx, world, "ddp");
  const auto fsdp = train(ctx, world, "fsdp");
  // The model gathered from the shards is the same on every rank.
  const double worst = expect_losses_follow_ddp(ddp, fsdp, precision, world == 2 && clip == 0.0);
  int64_t total = 0;
  for (const auto& p : Trainer(ctx).model()->parameters()) total += p.numel();
  for (int r = 0; r < world; ++r) {
    // Between steps a rank holds no full block or root parameter, only its shards: about 1/world
    // of the model (each unit padded to a multiple of the world size), moments for them alone.
    EXPECT_EQ(fsdp[r].resident_parameter_bytes, 0) << "rank " << r;
    const int64_t units = ctx.cfg.num_layers + 1;
    EXPECT_GE(fsdp[r].shard_bytes, total * 4 / world) << "rank " << r;
    EXPECT_LT(fsdp[r].shard_bytes, (total / world + units) * 4) << "rank " << r;
    EXPECT_EQ(fsdp[r].moments * 4, fsdp[r].shard_bytes) << "rank " << r;
  }
  RecordProperty("max_relative_loss_difference", fmt::format("{:.3g}", worst));
  std::cout << "FSDP vs DDP, largest relative loss difference over " << kSteps << " steps: " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    WorldsPrecisionsClipping, ShardedTrajectoryTest,
    ::testing::Values(std::make_tuple(2, std::string("fp32"), 0.0), std::make_tuple(2, std::string("fp32"), 1.0),
                      std::make_tuple(2, std::string("bf16"), 0.0), std::make_tuple(2, std::string("bf16"), 1.0),
                      std::make_tuple(4, std::string("fp32"), 0.0), std::make_tuple(4, std::string("fp32"), 1.0),
                      std::make_tuple(4, std::string("bf16"), 1.0)),
    [](const auto& info) {
      return fmt::format("world{}_{}_clip{}", std::get<0>(info.param), std::get<1>(info.param),
                         std::get<2>(info.param) > 0 ? "on" : "off");
    });

// Per step ZeRO issues what DeepSpeed's stage 1/2 does: one reduce-scatter of the gradients per
// gradient sync, one 1-element all-reduce of the squared norm, one all-gather of the parameters,
// each recorded with its kind and bytes (report.json's collectives table). DDP: all-reduces only.
TEST(ShardedCollectives, ZeroRecordsReduceScatterNormAndAllGather) {
  RunContext ctx = tiny_run(2, "fp32", 1.0);
  ctx.cfg.steps = 3;
  ctx.cfg.grad_accum_steps = 2;
  ctx.cfg.grad_sync_interval = 1;  // two gradient syncs per step
  const auto zero = train(ctx, 2, "zero");
  for (const auto& rec : zero[0].records) {
    std::map<std::string, int> ops;
    for (const auto& c : rec.collectives) ++ops[c.op];
    EXPECT_EQ(ops, (std::map<std::string, int>{
                       {"reduce_scatter_grads", 2}, {"allreduce_grad_norm", 1}, {"allgather_params", 1}}))
        << "step " << rec.step;
    for (const auto& c : rec.collectives) {
      EXPECT_GT(c.bytes, 0) << c.op;
      if (c.op == "allreduce_grad_norm") EXPECT_EQ(c.bytes, 4);
    }
  }
  // Two syncs in one step average the whole window, as one sync at its end would.
  ctx.cfg.grad_sync_interval = 2;
  const auto once = train(ctx, 2, "zero");
  for (size_t i = 0; i < once[0].records.size(); ++i)
    EXPECT_NEAR(zero[0].records[i].loss, once[0].records[i].loss, 1e-6 * once[0].records[i].loss);
  const auto ddp = train(ctx, 2, "ddp");
  for (const auto& c : ddp[0].records.front().collectives) EXPECT_EQ(c.op, "allreduce");
}

// Per step FSDP issues what FSDP2 does: for each block an all-gather of its parameters before its
// forward, another before its (recomputed) backward, a reduce-scatter of its gradients after it;
// the root gathered per forward and its gradients reduce-scattered per gradient sync; the
// 1-element all-reduce of the squared norm. Every all-gather of one unit moves its padded size.
TEST(ShardedCollectives, FsdpGathersEachBlockTwiceAndReduceScattersItOnce) {
  RunContext ctx = tiny_run(2, "fp32", 1.0);
  ctx.cfg.steps = 3;
  ctx.cfg.grad_accum_steps = 2;
  ctx.cfg.grad_sync_interval = 2;  // one gradient sync per step: the blocks still reduce-scatter per backward
  const auto fsdp = train(ctx, 2, "fsdp");
  std::map<std::string, int> expected{
      {"fsdp:all_gather.root.fwd", 2}, {"fsdp:reduce_scatter.root", 1}, {"allreduce_grad_norm", 1}};
  for (int b = 0; b < ctx.cfg.num_layers; ++b)
    for (const char* op : {"fsdp:all_gather.block{}.fwd", "fsdp:all_gather.block{}.bwd", "fsdp:reduce_scatter.block{}"})
      expected[fmt::format(fmt::runtime(op), b)] = 2;  // once per micro-batch
  for (int r = 0; r < 2; ++r)
    for (const auto& rec : fsdp[r].records) {
      std::map<std::string, int> ops;
      std::map<std::string, int64_t> bytes;
      for (const auto& c : rec.collectives) {
        ++ops[c.op];
        bytes[c.op] = c.bytes;
      }
      EXPECT_EQ(ops, expected) << "rank " << r << " step " << rec.step;
      EXPECT_EQ(bytes["allreduce_grad_norm"], 4);
      for (int b = 0; b < ctx.cfg.num_layers; ++b) {
        const auto block = fmt::format("block{}", b);
        EXPECT_GT(bytes["fsdp:all_gather." + block + ".fwd"], 0);
        EXPECT_EQ(bytes["fsdp:all_gather." + block + ".fwd"], bytes["fsdp:all_gather." + block + ".bwd"]);
        EXPECT_EQ(bytes["fsdp:all_gather." + block + ".fwd"], bytes["fsdp:reduce_scatter." + block]);
      }
    }
}

// After ZeRO's all-gather every rank holds the whole model (FSDP gathers it for the check: the
// comm monitor's compare_parameters), so the cross-rank parameter checksum applies as under DDP:
// silent on a clean run, and naming the rank whose gathered copy of another rank's shard came
// back wrong (what a corrupt all-gather leaves behind).
void expect_checksum_names_a_wrong_gathered_shard(const std::string& data_parallel) {
  RunContext ctx = tiny_run(2, "fp32", 1.0);
  ctx.cfg.steps = 3;
  ctx.cfg.data_parallel = *parse_name<DataParallel>(data_parallel);
  std::vector<std::vector<Finding>> clean(2), corrupt(2);
  std::mutex building;
  test::run_loopback_ranks(
      2,
      [&](const LaunchInfo& launch) {
        return make_gradient_sync(launch, plan_group(ctx.cfg, launch.world_size), ctx.cfg, torch::kCPU);
      },
      [&](std::shared_ptr<GradientSync>& sync, int rank) {
        std::unique_ptr<Trainer> trainer;
        {
          std::lock_guard lock(building);
          trainer = std::make_unique<Trainer>(ctx, sync);
        }
        trainer->run();
        CrossRankChecks checks(sync);
        FsdpModel* fsdp = trainer->model()->fsdp();
        ASSERT_EQ(fsdp != nullptr, data_parallel == "fsdp");
        if (fsdp) fsdp->gather_all();
        const auto params = trainer->model()->parameters();
        clean[rank] = checks.compare_parameters(params);
        // Rank 1's copy of rank 0's shard (the first elements: the first parameter) is off by one ulp.
        if (rank == 1) {
          torch::NoGradGuard no_grad;
          auto first = params.front().view(-1).narrow(0, 0, 1);
          first.copy_(torch::nextafter(first, first + 1));
        }
        corrupt[rank] = checks.compare_parameters(params);
        if (fsdp) fsdp->release_all();
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(clean[r].empty()) << "rank " << r;
    ASSERT_EQ(corrupt[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(corrupt[r][0].signature, "parameter_divergence");
    EXPECT_NE(corrupt[r][0].message.find("rank 1"), std::string::npos) << corrupt[r][0].message;
  }
}

TEST(ShardedCollectives, ParameterChecksumNamesTheRankWithAWrongGatheredShard) {
  expect_checksum_names_a_wrong_gathered_shard("zero");
}

TEST(ShardedCollectives, FsdpParameterChecksumNamesTheRankWithAWrongGatheredShard) {
  expect_checksum_names_a_wrong_gathered_shard("fsdp");
}

// A world of one has nothing to shard: zero is recorded but trains exactly as ddp.
TEST(ShardedCollectives, OneRankZeroIsDdp) {
  RunContext ctx = tiny_run(1, "fp32", 1.0);
  ctx.cfg.steps = 4;
  ctx.cfg.data_parallel = DataParallel::zero;
  Trainer zero(ctx);
  const auto zero_losses = zero.run().losses;
  ctx.cfg.data_parallel = DataParallel::ddp;
  Trainer ddp(ctx);
  EXPECT_EQ(zero_losses, ddp.run().losses);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
