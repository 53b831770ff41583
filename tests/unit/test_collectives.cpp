// Real c10d groups on loopback: N threads in this process, each a rank with its own
// ProcessGroupGloo on one TCPStore. Gradient averaging, and every cross-rank check both firing
// on an injected fault and silent on a clean run; timeouts name the rank that never came.
#include <chrono>
#include <cmath>
#include <thread>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/detectors/comm_monitor.hpp"
#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"
#include "rocm_conformance_llm/checks/detectors/op_counter.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/transport/process_group_sync.hpp"
#include "rocm_conformance_llm/transport/subgroups.hpp"
#include "support/distributed.hpp"
#include "support/gpu.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using Clock = SteadyClock;
using std::chrono::milliseconds;
using test::free_port;

// Short enough to keep the suite fast, long enough for 4 ranks on 2 busy cores.
constexpr double kTimeoutS = 2.0;

using test::loopback_launch;

// Runs body(sync, rank) on `world` threads, each rank with its own group (run_loopback_ranks).
template <typename Body>
void run_ranks(int world, double bucket_mb, Body body) {
  test::run_loopback_ranks(
      world,
      [&](const LaunchInfo& launch) {
        return std::make_shared<ProcessGroupSync>(
            Communicator::connect(launch, torch::kCPU, milliseconds(static_cast<int64_t>(kTimeoutS * 1000))),
            bucket_mb);
      },
      body);
}

// Deterministic values k/16 with |k| <= 1000, different for each `seed`: any summation order
// is exact, so results compare bitwise. (No global RNG: the ranks are threads of one process.)
torch::Tensor dyadic(const std::vector<int64_t>& shape, int64_t seed) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  const torch::Tensor k = (torch::arange(n, torch::kLong) * (2 * seed + 7) + 31 * seed).remainder(2001) - 1000;
  return k.to(torch::kFloat).div(16).reshape(shape);
}

// Rank r's parameters (zeros) and gradients; with `one_buffer` the gradients are views lying
// back to back in one tensor, as FlatAdamW lays them out (reduced in place, without copies).
std::vector<torch::Tensor> parameters_with_grads(int rank, bool one_buffer = false) {
  const std::vector<std::vector<int64_t>> shapes = {{5, 3}, {7}, {2, 2, 2}, {300}};
  const torch::Tensor buffer = torch::empty({15 + 7 + 8 + 300});
  int64_t offset = 0;
  std::vector<torch::Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    torch::Tensor p = torch::zeros(shapes[i]).requires_grad_(true);
    const torch::Tensor values = dyadic(shapes[i], 10 * rank + static_cast<int64_t>(i));
    p.mutable_grad() = one_buffer ? buffer.narrow(0, offset, values.numel()).view_as(values).copy_(values) : values;
    offset += values.numel();
    params.push_back(p);
  }
  return params;
}

// DDP's averaging (DdpBuckets) over the rank's whole group, in buckets of about `bucket_mb`.
void average_gradients(ProcessGroupSync& sync, const std::vector<torch::Tensor>& params,
                       std::vector<CollectiveSample>& out, double bucket_mb = 25.0) {
  DdpBuckets(*sync.world().communicator, std::llround(bucket_mb * 1048576.0)).average_gradients(params, out);
}

class GradientAveragingTest : public ::testing::TestWithParam<int> {};

TEST_P(GradientAveragingTest, ExactMeanWhateverTheBucketSize) {
  const int world = GetParam();
  // The expected mean, from every rank's gradients generated here.
  std::vector<torch::Tensor> expected;
  for (const auto& p : parameters_with_grads(0)) expected.push_back(torch::zeros_like(p));
  for (int r = 0; r < world; ++r) {
    const auto params = parameters_with_grads(r);
    for (size_t i = 0; i < params.size(); ++i) {
      // Rank 1 leaves parameter 2 unused: it must count as zeros, not desynchronise buckets.
      if (!(r == 1 && i == 2)) expected[i] += params[i].grad();
    }
  }
  for (auto& e : expected) e /= world;

  for (const auto& [one_buffer, bucket_mb] :
       {std::pair{false, 1e-6 /* one tensor per bucket */}, std::pair{false, 25.0 /* one bucket */},
        std::pair{true, 1e-6}, std::pair{true, 25.0}}) {
    SCOPED_TRACE(one_buffer ? "gradients in one buffer" : "separate gradients");
    std::vector<std::vector<torch::Tensor>> results(world);
    std::vector<std::vector<CollectiveSample>> samples(world);
    run_ranks(world, bucket_mb, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
      auto params = parameters_with_grads(r, one_buffer);
      if (r == 1) params[2].mutable_grad() = torch::Tensor();
      average_gradients(*sync, params, samples[r], bucket_mb);
      for (const auto& p : params) results[r].push_back(p.grad().clone());
    });
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(torch::equal(results[r][i], expected[i]))
            << "rank " << r << " param " << i << " bucket_mb " << bucket_mb;
      }
      const size_t buckets = bucket_mb < 1 ? expected.size() : 1;
      ASSERT_EQ(samples[r].size(), buckets);
      int64_t bytes = 0;
      for (size_t b = 0; b < buckets; ++b) {
        EXPECT_EQ(samples[r][b].op, "allreduce");
        EXPECT_EQ(samples[r][b].sequence, static_cast<int64_t>(b) + 1);
        EXPECT_GT(samples[r][b].seconds, 0.0);
        EXPECT_GT(samples[r][b].bus_bandwidth_gbps, 0.0);
        bytes += samples[r][b].bytes;
      }
      EXPECT_EQ(bytes, (15 + 7 + 8 + 300) * 4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, GradientAveragingTest, ::testing::Values(2, 4));

// Gradients lying back to back in one buffer are all-reduced where they are: no bucket is
// assembled with a copy (aten::cat) and scattered back. Separate gradients need that copy.
TEST(ProcessGroupSyncTest, GradientsInOneBufferAreReducedWithoutCopies) {
  for (const bool one_buffer : {true, false}) {
    OpCounter ops;
    run_ranks(2, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
      auto params = parameters_with_grads(r, one_buffer);
      std::vector<CollectiveSample> samples;
      average_gradients(*sync, params, samples);
      EXPECT_EQ(samples.size(), 1u);
    });
    ops.stop();
    const auto counts = ops.counts();
    const int64_t cats = counts.count("aten::cat") ? counts.at("aten::cat") : 0;
    if (one_buffer) EXPECT_EQ(cats, 0);
    else EXPECT_EQ(cats, 2);  // one bucket per rank
  }
}

TEST(ProcessGroupSyncTest, ScalarsAndBroadcast) {
  const int world = 3;
  std::vector<double> means(world);
  std::vector<std::vector<std::vector<double>>> gathered(world);
  std::vector<torch::Tensor> broadcast(world);
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    means[r] = sync->mean_across_ranks(1.0 + r);  // (1+2+3)/3
    gathered[r] = CrossRankChecks(sync).all_gather_values({0.1 * r, -1.0 * r}, "test_gather");
    std::vector<torch::Tensor> params = {dyadic({4, 4}, r), dyadic({3}, 100 + r)};
    sync->broadcast_parameters(params);
    broadcast[r] = torch::cat({params[0].reshape(-1), params[1]});
  });
  const torch::Tensor rank0 = torch::cat({dyadic({16}, 0), dyadic({3}, 100)});
  for (int r = 0; r < world; ++r) {
    EXPECT_DOUBLE_EQ(means[r], 2.0);
    ASSERT_EQ(gathered[r].size(), 3u);
    for (int q = 0; q < world; ++q) EXPECT_EQ(gathered[r][q], (std::vector<double>{0.1 * q, -1.0 * q}));
    EXPECT_TRUE(torch::equal(broadcast[r], rank0)) << "rank " << r;
  }
}

TEST(CommChecksTest, CanaryPassesAndFailsWhenOneRankPerturbsItsContribution) {
  const int world = 4;
  std::vector<std::vector<Finding>> clean(world), faulty(world);
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    CrossRankChecks checks(sync);
    clean[r] = checks.run_canary();
    if (r == 1) checks.inject_canary_fault(1.0);
    faulty[r] = checks.run_canary();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(clean[r].empty()) << "rank " << r << ": " << (clean[r].empty() ? "" : clean[r][0].message);
    // One finding per canary size, on every rank, each naming every rank's wrong result.
    ASSERT_EQ(faulty[r].size(), 3u) << "rank " << r;
    for (const auto& f : faulty[r]) {
      EXPECT_EQ(f.component, component::rccl);
      EXPECT_EQ(f.signature, "allreduce_canary_mismatch");
      EXPECT_EQ(f.severity, Severity::fail);
      EXPECT_EQ(f.rank, r);
      EXPECT_EQ(f.evidence["wrong_ranks"], nlohmann::json({0, 1, 2, 3}));
      EXPECT_EQ(f.evidence["got"].get<double>(), f.evidence["expected"].get<double>() + 1.0);
    }
    EXPECT_EQ(faulty[r][0].evidence["bytes"], 4096);
  }
}

TEST(CommChecksTest, ParameterChecksumNamesThePerturbedRank) {
  for (const int world : {2, 4}) {
    const int culprit = world - 1;
    std::vector<std::vector<Finding>> clean(world), perturbed(world);
    run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
      std::vector<torch::Tensor> params = {dyadic({16, 8}, 42), dyadic({8}, 43)};
      CrossRankChecks checks(sync);
      clean[r] = checks.compare_parameters(params);
      if (r == culprit) params[0][3][2].fill_(std::nextafter(params[0][3][2].item<float>(), 1e9f));  // one ulp
      perturbed[r] = checks.compare_parameters(params);
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(clean[r].empty()) << "world " << world << " rank " << r;
      ASSERT_EQ(perturbed[r].size(), 1u) << "world " << world << " rank " << r;
      const Finding& f = perturbed[r][0];
      EXPECT_EQ(f.signature, "parameter_divergence");
      EXPECT_EQ(f.component, component::rccl);
      EXPECT_EQ(f.evidence["differing_ranks"], nlohmann::json({culprit}));
      EXPECT_EQ(f.evidence["reference_rank"], 0);
      EXPECT_NE(f.message.find("rank " + std::to_string(culprit)), std::string::npos) << f.message;
    }
  }
}

// compare_parameters(all) once per parameter of `params`, that one a unit in the last place off
// on the culprit rank (restored after), by parameter name.
std::map<std::string, std::vector<Finding>> compared_with_one_ulp_off(
    CrossRankChecks& checks, const std::map<std::string, torch::Tensor>& params, const std::vector<torch::Tensor>& all,
    bool culprit) {
  std::map<std::string, std::vector<Finding>> findings;
  for (const auto& [name, p] : params) {
    const torch::Tensor kept = p.clone();
    if (culprit) p[1][2].fill_(std::nextafter(p[1][2].item<float>(), 1e9f));
    findings[name] = checks.compare_parameters(all);
    p.copy_(kept);
  }
  return findings;
}

// A split model (tensor parallel 2 x data parallel 2): tensor-parallel shards differ by
// tensor-parallel rank, which is no divergence; a one-ulp change on rank 3 is named whichever kind
// it strikes (replicated: among all four ranks; a shard: against rank 1, which holds the same one).
TEST(CommChecksTest, SplitModelComparesOnlyTheRanksThatMustAgree) {
  TrainingConfig cfg;
  cfg.tensor_parallel_degree = 2;
  const ParallelLayout layout = plan_parallel_layout(cfg, 4);
  constexpr int kCulprit = 3;
  std::vector<std::vector<Finding>> clean(4);
  std::vector<std::map<std::string, std::vector<Finding>>> perturbed(4);
  run_ranks(4, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    sync->split_model(layout);
    const std::map<std::string, torch::Tensor> params = {{"replicated", dyadic({16, 8}, 42)},
                                                         {"tensor_split", dyadic({8, 4}, 100 + r % 2)}};
    sync->set_split_parameters({.partial = {}, .tensor_split = {params.at("tensor_split")}});
    std::vector<torch::Tensor> all;
    for (const auto& [name, p] : params) all.push_back(p);
    CrossRankChecks checks(sync);
    clean[r] = checks.compare_parameters(all);
    perturbed[r] = compared_with_one_ulp_off(checks, params, all, r == kCulprit);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(clean[r].empty()) << "rank " << r << ": " << clean[r].front().message;
    for (const auto& [name, findings] : perturbed[r]) {
      ASSERT_EQ(findings.size(), 1u) << name << ", rank " << r;
      EXPECT_EQ(findings[0].signature, "parameter_divergence");
      EXPECT_EQ(findings[0].evidence["differing_ranks"], nlohmann::json({kCulprit}))
          << name << ": " << findings[0].message;
    }
  }
}

// Experts split over 2 of 4 data-parallel ranks (2 experts: ranks 0 and 2 hold expert 0, ranks 1
// and 3 expert 1) differ by expert rank, which is no divergence; a one-ulp change of rank 3's
// expert is named against rank 1, which holds the same one. Split over all 4 (4 experts), an
// expert is held by one rank and compared with nobody: only a replicated weight can diverge.
TEST(CommChecksTest, ExpertsAreComparedOnlyAmongTheRanksHoldingThem) {
  constexpr int kCulprit = 3;
  for (const int64_t experts : {2, 4}) {
    TrainingConfig cfg;
    cfg.moe_experts = experts;
    const ParallelLayout layout = plan_parallel_layout(cfg, 4);
    ASSERT_EQ(layout.expert_degree, experts);
    std::vector<std::vector<Finding>> clean(4);
    std::vector<std::map<std::string, std::vector<Finding>>> perturbed(4);
    std::vector<nlohmann::json> broadcast(4);  // distances from rank 0's weights and the first holder's experts
    run_ranks(4, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
      sync->split_model(layout);
      const std::map<std::string, torch::Tensor> params = {{"replicated", dyadic({16, 8}, 42)},
                                                           {"expert", dyadic({8, 4}, 100 + layout.expert_rank(r))}};
      sync->set_split_parameters({.partial = {}, .tensor_split = {}, .experts = {params.at("expert")}});
      std::vector<torch::Tensor> all;
      for (const auto& [name, p] : params) all.push_back(p);
      CrossRankChecks checks(sync);
      clean[r] = checks.compare_parameters(all);
      perturbed[r] = compared_with_one_ulp_off(checks, params, all, r == kCulprit);
      // The start-up broadcast gives each rank rank 0's replicated weights and the first holder's
      // experts, never another expert's.
      for (const auto& [name, p] : params) p.add_(r);
      sync->broadcast_parameters(all);
      const int first_holder = layout.expert_data_group(r).front();
      broadcast[r] = {(params.at("replicated") - dyadic({16, 8}, 42)).abs().max().item<double>(),
                      (params.at("expert") - dyadic({8, 4}, 100 + layout.expert_rank(r)) - first_holder)
                          .abs()
                          .max()
                          .item<double>()};
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(clean[r].empty()) << experts << " experts, rank " << r << ": " << clean[r].front().message;
      ASSERT_EQ(perturbed[r].at("replicated").size(), 1u) << experts << " experts, rank " << r;
      EXPECT_EQ(perturbed[r].at("replicated")[0].evidence["differing_ranks"], nlohmann::json({kCulprit}));
      const auto& expert = perturbed[r].at("expert");
      if (experts == 4) {
        EXPECT_TRUE(expert.empty()) << "rank " << r << ": " << expert.front().message;
        continue;
      }
      ASSERT_EQ(expert.size(), 1u) << "rank " << r;
      EXPECT_EQ(expert[0].evidence["differing_ranks"], nlohmann::json({kCulprit})) << expert[0].message;
      EXPECT_EQ(expert[0].evidence["reference_rank"], 0) << expert[0].message;  // the lowest agreeing rank overall
      EXPECT_NE(expert[0].message.find("rank 3 experts sum"), std::string::npos) << expert[0].message;
      EXPECT_NE(expert[0].message.find("vs rank 1's"), std::string::npos) << expert[0].message;
    }
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(broadcast[r], nlohmann::json({0.0, 0.0})) << experts << " experts, rank " << r;
  }
}

TEST(CommChecksTest, RankThatNeverArrivesGivesOthersANamedTimeout) {
  const int world = 4;
  const int absent = 3;
  std::vector<std::optional<CollectiveError>> errors(world);
  std::vector<double> waited(world, 0.0);
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    std::vector<CollectiveSample> samples;
    auto params = parameters_with_grads(r);
    sync->begin_step(1);
    average_gradients(*sync, params, samples);  // everyone
    sync->begin_step(2);
    if (r == absent) return;  // stops taking part (hung GPU, dead process)
    const auto start = Clock::now();
    try {
      average_gradients(*sync, params, samples);
    } catch (const CollectiveError& e) {
      errors[r] = e;
    }
    waited[r] = seconds_since(start);
  });
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r << " did not time out";
    const Finding& f = errors[r]->finding();
    EXPECT_EQ(f.signature, "collective_timeout") << f.message;
    EXPECT_EQ(f.component, component::rccl);
    EXPECT_EQ(f.severity, Severity::fail);
    EXPECT_EQ(f.step, 2);
    EXPECT_EQ(f.evidence["missing_ranks"], nlohmann::json({absent})) << f.message;
    EXPECT_NE(f.message.find("rank 3 never entered it"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("#1 'allreduce' at step 1"), std::string::npos) << f.message;  // its last heartbeat
    EXPECT_GE(waited[r], 0.9 * kTimeoutS);
    EXPECT_LE(waited[r], kTimeoutS + 1.5);
  }
}

TEST(CommChecksTest, VanishedRankZeroIsNamedThroughTheUnreachableStore) {
  const int world = 2;
  std::optional<CollectiveError> error;
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    std::vector<CollectiveSample> samples;
    auto params = parameters_with_grads(r);
    average_gradients(*sync, params, samples);
    if (r == 0) {
      sync.reset();  // rank 0 exits: its group and the store it serves go away
      return;
    }
    std::this_thread::sleep_for(milliseconds(200));
    try {
      average_gradients(*sync, params, samples);
    } catch (const CollectiveError& e) {
      error = e;
    }
  });
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->finding().message.find("unreachable, so rank 0 is likely gone"), std::string::npos)
      << error->finding().message;
}

TEST(CommChecksTest, SkippedCollectiveIsNamedBySequenceCheck) {
  const int world = 4;
  const int skipper = 2;
  std::vector<std::optional<CollectiveError>> timeouts(world), desyncs(world);
  std::vector<std::vector<Finding>> logged(world);
  DiagnosticsConfig diag;
  diag.warmup_steps = 0;
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    FindingLog log(find_signature);
    CommMonitorOptions options;
    options.check_interval = 1;
    CommMonitor monitor(diag, log, sync, {}, options);
    sync->begin_step(1);
    std::vector<CollectiveSample> samples;
    auto params = parameters_with_grads(r);
    if (r != skipper) {
      try {
        average_gradients(*sync, params, samples);
      } catch (const CollectiveError& e) {
        timeouts[r] = e;
      }
    } else {
      // Its code path skipped the gradient all-reduce; it reaches the check while the others
      // still wait for it (their timeout), and its own store wait outlasts theirs.
      std::this_thread::sleep_for(std::chrono::duration<double>(0.75 * kTimeoutS));
    }
    StepRecord record;
    record.step = 1;
    try {
      monitor.on_step(record);
    } catch (const CollectiveError& e) {
      desyncs[r] = e;
    }
    logged[r] = log.snapshot();
  });
  for (int r = 0; r < world; ++r) {
    if (r != skipper) {
      ASSERT_TRUE(timeouts[r].has_value()) << "rank " << r;
      EXPECT_EQ(timeouts[r]->finding().evidence["missing_ranks"], nlohmann::json({skipper}));
    }
    // Every rank, the skipper included, stops with the same verdict naming the skipper.
    ASSERT_TRUE(desyncs[r].has_value()) << "rank " << r;
    const Finding& f = desyncs[r]->finding();
    EXPECT_EQ(f.signature, "collective_desync");
    EXPECT_EQ(f.step, 1);
    EXPECT_EQ(f.evidence["desynchronised_ranks"], nlohmann::json({skipper}));
    EXPECT_EQ(f.evidence["sequences"], nlohmann::json({1, 1, 0, 1}));
    EXPECT_NE(f.message.find("rank 2 entered 0"), std::string::npos) << f.message;
    ASSERT_EQ(logged[r].size(), 1u);
    EXPECT_EQ(logged[r][0].signature, "collective_desync");
  }
}

TEST(CommChecksTest, SequenceCheckNamesARankThatNeverComes) {
  const int world = 3;
  const int absent = 2;
  std::vector<std::optional<CollectiveError>> errors(world);
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    if (r == absent) return;
    try {
      CrossRankChecks(sync).compare_collective_sequences();
    } catch (const CollectiveError& e) {
      errors[r] = e;
    }
  });
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->finding().signature, "exchange_timeout");
    EXPECT_EQ(errors[r]->finding().evidence["missing_ranks"], nlohmann::json({absent})) << errors[r]->what();
  }
}

TEST(CommChecksTest, RendezvousNamesTheRankThatNeverJoined) {
  const int port = free_port();
  const auto start = Clock::now();
  try {
    Communicator::connect(loopback_launch(0, 2, port), torch::kCPU, milliseconds(1500));
    FAIL() << "rendezvous succeeded without rank 1";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.finding().signature, "rendezvous_failed");
    EXPECT_EQ(e.finding().evidence["missing_ranks"], nlohmann::json({1})) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 never joined"), std::string::npos) << e.what();
  }
  EXPECT_LE(seconds_since(start), 1.5 + 1.5);
}

// Trains `steps` synthetic steps through the monitor; `slow_rank` (if >= 0) sleeps before each
// all-reduce. Returns each rank's findings and the all-reduce samples of its last step.
struct MonitoredRun {
  std::vector<std::vector<Finding>> findings;
  std::vector<std::vector<CollectiveSample>> last_samples;
};

MonitoredRun run_monitored(int world, int steps, int slow_rank, double sleep_s) {
  MonitoredRun run{std::vector<std::vector<Finding>>(world), std::vector<std::vector<CollectiveSample>>(world)};
  DiagnosticsConfig diag;
  diag.warmup_steps = 2;
  run_ranks(world, 25.0, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    FindingLog log(find_signature);
    CommMonitorOptions options;
    options.check_interval = 5;              // canary, checksum and sequence checks ride along
    auto params = parameters_with_grads(0);  // identical on every rank, like real replicas
    CommMonitor monitor(diag, log, sync, params, options);
    monitor.preflight();
    for (int step = 1; step <= steps; ++step) {
      sync->begin_step(step);
      const auto start = Clock::now();
      auto grads = parameters_with_grads(r);
      if (r == slow_rank) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      std::vector<CollectiveSample> samples;
      average_gradients(*sync, grads, samples);
      run.last_samples[r] = samples;
      StepRecord record;
      record.step = step;
      record.rank = r;
      record.world_size = world;
      record.step_time_s = seconds_since(start);
      record.collectives = samples;
      monitor.on_step(record);
    }
    run.findings[r] = log.snapshot();
  });
  return run;
}

TEST(CommMonitorTest, CleanRunStaysSilent) {
  const MonitoredRun run = run_monitored(4, 15, -1, 0.0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(run.findings[r].empty()) << "rank " << r << ": " << run.findings[r][0].message;
  }
}

TEST(CommMonitorTest, SleepingRankIsNamedStragglerAndOthersSeeTheLatency) {
  const int slow = 2;
  const double sleep_s = 0.06;
  const MonitoredRun run = run_monitored(4, 14, slow, sleep_s);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(run.findings[r].size(), 1u) << "rank " << r;
    const Finding& f = run.findings[r][0];
    EXPECT_EQ(f.signature, "straggler_rank");
    EXPECT_EQ(f.severity, Severity::warn);
    EXPECT_EQ(f.evidence["straggler_rank"], slow);
    EXPECT_EQ(f.step, 12);  // warm-up 2 steps, then a full 10-step window
    EXPECT_NE(f.message.find("rank 2 is a straggler"), std::string::npos) << f.message;
  }
  // The latency spike shows in the others' all-reduce (they wait for the sleeper), more than in
  // the straggler's own: a comparison, not a wall-clock bound, so a loaded host cannot fail it.
  for (int r = 0; r < 4; ++r) {
    if (r == slow) continue;
    EXPECT_GT(run.last_samples[r].at(0).seconds, 0.5 * sleep_s) << "rank " << r;
    EXPECT_GT(run.last_samples[r].at(0).seconds, run.last_samples[slow].at(0).seconds) << "rank " << r;
  }
}

TEST(MakeGradientSyncTest, OneProcessIsLocalAndGpuRanksMeetOverRcclWhereBuilt) {
  TrainingConfig cfg;
  const auto local = make_gradient_sync(LaunchInfo{}, plan_group(cfg, 1), cfg, torch::kCPU);
  EXPECT_EQ(local->world_size(), 1);
  EXPECT_EQ(local->backend(), "none");
  EXPECT_EQ(std::dynamic_pointer_cast<ProcessGroupSync>(local), nullptr);
  EXPECT_EQ(collective_backend(torch::kCPU), "gloo");
#if defined(RCL_HAVE_C10D_NCCL)
  EXPECT_EQ(collective_backend(torch::Device(torch::kCUDA, 0)),
            std::string(RCL_TORCH_BUILD) == "rocm" ? "rccl" : "nccl");
#else
  EXPECT_EQ(collective_backend(torch::Device(torch::kCUDA, 0)),
            "gloo");  // measured on an H100: bench/fault-matrix-gpu.md
#endif
}

// CMake finds c10d's NCCL group by what libtorch ships, not by vendor: every GPU libtorch this
// project builds against (PyPI's CUDA wheel in the wheel lane, ROCm's wheels) has it, a CPU one
// (Debian's 1.13 in the host lane) does not. Fails when the detection misses it or invents it.
TEST(MakeGradientSyncTest, NcclProcessGroupIsBuiltExactlyWhereLibtorchIsAGpuBuild) {
  const bool gpu_libtorch = std::string(RCL_TORCH_BUILD) != "cpu";
#if defined(RCL_HAVE_C10D_NCCL)
  EXPECT_TRUE(gpu_libtorch) << "the NCCL process group was compiled into a " RCL_TORCH_BUILD " build";
#else
  EXPECT_FALSE(gpu_libtorch) << "this " RCL_TORCH_BUILD " libtorch has c10d's NCCL group, but it was not compiled in";
#endif
}

// Two ranks on CPU choose Gloo, and the group says so (config.json records it).
TEST(MakeGradientSyncTest, CpuRanksRecordGloo) {
  run_ranks(2, 1.0, [](const std::shared_ptr<ProcessGroupSync>& sync, int) { EXPECT_EQ(sync->backend(), "gloo"); });
}

// On the GPU machine: one rank on GPU 0 runs the device group's whole path (for c10d's NCCL
// group: its rendezvous, an all-reduce and a broadcast of device tensors timed on the stream, the
// host group beside it), and a rank whose peer never comes gets the named rendezvous timeout.
TEST(GpuCollectivesTest, OneRankGroupReducesDeviceTensorsTimedOnTheStream) {
  RCL_REQUIRE_GPU();
  const auto comm = Communicator::connect(loopback_launch(0, 1, free_port()), testing::kGpu, milliseconds(60000));
  EXPECT_EQ(comm->backend(), collective_backend(testing::kGpu));
  torch::Tensor values = dyadic({1000}, 3).to(testing::kGpu);
  const torch::Tensor before = values.cpu();
  const CollectiveSample sample = comm->all_reduce_sum(values, "gpu-allreduce");
  EXPECT_TRUE(torch::equal(values.cpu(), before));  // the sum over one rank
  EXPECT_EQ(sample.bytes, 4000);
  const bool on_stream = comm->backend() != "gloo" && DeviceInterval::available();
  ASSERT_EQ(static_cast<bool>(sample.settle), on_stream) << comm->backend();
  if (on_stream) {
    CollectiveSample settled = sample;
    settled.settle(settled);
    EXPECT_GT(settled.seconds, 0.0);
  }
  torch::Tensor host = torch::full({4}, 2.5);
  comm->all_reduce_sum(host, "host-allreduce");  // the Gloo host group
  EXPECT_TRUE(torch::equal(host, torch::full({4}, 2.5)));
}

TEST(GpuCollectivesTest, RankWithoutItsPeerGetsANamedRendezvousTimeout) {
  RCL_REQUIRE_GPU();
  try {
    Communicator::connect(loopback_launch(0, 2, free_port()), testing::kGpu, milliseconds(1500));
    FAIL() << "rendezvous succeeded without rank 1";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.finding().signature, "rendezvous_failed");
    EXPECT_EQ(e.finding().evidence["missing_ranks"], nlohmann::json({1})) << e.what();
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
