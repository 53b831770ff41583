// Every collective kind on real c10d groups over loopback (ranks are threads of this process, one
// intra-op thread each): all-reduce (SUM/AVG/MIN/MAX), all-gather into one tensor, reduce-scatter
// (SUM/AVG), uneven all-to-all after a counts all-to-all, broadcast from every root; fp32, bf16
// and int64, at 2, 4 and 8 ranks, each against exact expected values. On Gloo several of these
// are emulations (route_collective): the same exact values prove them. Then the battery: exact on
// clean runs over several seeds, naming a wrong shard's rank and a stalled reduce-scatter.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/detectors/collective_check.hpp"
#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"
#include "rocm_conformance_llm/transport/collective_battery.hpp"
#include "rocm_conformance_llm/transport/process_group_sync.hpp"
#include "support/distributed.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using std::chrono::milliseconds;

// Long enough for 8 ranks on 2 busy cores.
constexpr double kTimeoutS = 10.0;

template <typename Body>
void run_ranks(int world, Body body, double timeout_s = kTimeoutS) {
  test::run_loopback_ranks(
      world,
      [&](const LaunchInfo& launch) {
        return std::make_shared<ProcessGroupSync>(
            Communicator::connect(launch, torch::kCPU, milliseconds(static_cast<int64_t>(timeout_s * 1000))), 25.0);
      },
      body);
}

template <typename Body>
void run_communicators(int world, Body body) {
  test::run_loopback_ranks(
      world,
      [&](const LaunchInfo& launch) {
        return std::shared_ptr<Communicator>(
            Communicator::connect(launch, torch::kCPU, milliseconds(static_cast<int64_t>(kTimeoutS * 1000))));
      },
      body);
}

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kBFloat16, torch::kLong};

torch::Tensor longs(std::vector<int64_t> v, torch::ScalarType dtype) {
  return torch::tensor(v, torch::kLong).to(dtype);
}

class CollectiveKindsTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

// Failures are collected per rank (gtest assertions are not made on the rank threads).
using Problems = std::vector<std::vector<std::string>>;

void expect_equal(std::vector<std::string>& problems, const std::string& what, const torch::Tensor& got,
                  const torch::Tensor& expected) {
  if (got.scalar_type() != expected.scalar_type() || !torch::equal(got, expected)) {
    std::ostringstream text;
    text << what << ": got " << got << " expected " << expected;
    problems.push_back(text.str());
  }
}

void expect_no_problems(const Problems& problems) {
  for (size_t r = 0; r < problems.size(); ++r)
    for (const auto& p : problems[r]) ADD_FAILURE() << "rank " << r << ": " << p;
}

// Every CollectiveKind, in declaration order: the enum's values run from 0 and to_string names
// each (-Wall warns where a switch over the kinds misses one); past the last it says "?".
std::vector<CollectiveKind> every_collective_kind() {
  std::vector<CollectiveKind> kinds;
  for (int i = 0; to_string(static_cast<CollectiveKind>(i)) != "?"; ++i)
    kinds.push_back(static_cast<CollectiveKind>(i));
  return kinds;
}

TEST_P(CollectiveKindsTest, AllReduceEveryOpAndDtype) {
  const int n = GetParam();
  Problems problems(n);
  run_communicators(n, [&](std::shared_ptr<Communicator>& comm, int r) {
    for (const auto dtype : kDtypes) {
      const std::string name = c10::toString(dtype);
      // Element i of rank r: r + 1 + i (PyTorch's own test values, shifted per element).
      const auto input = [&] { return longs({r + 1, r + 2, r + 3}, dtype); };
      torch::Tensor t = input();
      comm->all_reduce(t, ReduceOp::sum, "t");
      const int64_t s = int64_t{n} * (n + 1) / 2;
      expect_equal(problems[r], name + " sum", t, longs({s, s + n, s + 2 * n}, dtype));
      t = input();
      comm->all_reduce(t, ReduceOp::max, "t");
      expect_equal(problems[r], name + " max", t, longs({n, n + 1, n + 2}, dtype));
      t = input();
      comm->all_reduce(t, ReduceOp::min, "t");
      expect_equal(problems[r], name + " min", t, longs({1, 2, 3}, dtype));
      // AVG of 2 * (r + 1): n + 1, exact in every dtype (integers truncate, as RCCL's do).
      t = input().mul(2);
      comm->all_reduce(t, ReduceOp::avg, "t");
      expect_equal(problems[r], name + " avg", t, longs({n + 1, n + 3, n + 5}, dtype));
    }
  });
  expect_no_problems(problems);
}

TEST_P(CollectiveKindsTest, AllGatherIntoOneTensor) {
  const int n = GetParam();
  Problems problems(n);
  run_communicators(n, [&](std::shared_ptr<Communicator>& comm, int r) {
    for (const auto dtype : kDtypes) {
      torch::Tensor out = torch::full({n, 3}, -1, torch::TensorOptions().dtype(dtype));
      const CollectiveSample sample = comm->all_gather_into(out, longs({10 * r, 10 * r + 1, 10 * r + 2}, dtype), "t");
      std::vector<int64_t> expected;
      for (int q = 0; q < n; ++q) expected.insert(expected.end(), {10 * q, 10 * q + 1, 10 * q + 2});
      expect_equal(problems[r], c10::toString(dtype), out.reshape(-1), longs(expected, dtype));
      if (sample.bytes != static_cast<int64_t>(3 * n * c10::elementSize(dtype)))
        problems[r].push_back("bytes are not the gathered total");
    }
  });
  expect_no_problems(problems);
}

TEST_P(CollectiveKindsTest, ReduceScatterSumAndAvg) {
  const int n = GetParam();
  Problems problems(n);
  run_communicators(n, [&](std::shared_ptr<Communicator>& comm, int r) {
    for (const auto dtype : kDtypes) {
      // Element i of rank r's input: r + i + 1 (PyTorch's test); rank r keeps chunk r (2 elements).
      std::vector<int64_t> in;
      for (int i = 0; i < 2 * n; ++i) in.push_back(r + i + 1);
      const torch::Tensor input = longs(in, dtype);
      const torch::Tensor before = input.clone();
      const int64_t ranks_sum = int64_t{n} * (n - 1) / 2;
      std::vector<int64_t> sums;
      for (int i = 2 * r; i < 2 * r + 2; ++i) sums.push_back(ranks_sum + int64_t{n} * (i + 1));
      torch::Tensor out = torch::empty({2}, torch::TensorOptions().dtype(dtype));
      comm->reduce_scatter(out, input, ReduceOp::sum, "t");
      expect_equal(problems[r], std::string(c10::toString(dtype)) + " sum", out, longs(sums, dtype));
      expect_equal(problems[r], "input untouched", input, before);
      // AVG of 2n x the input: sums / n * 2n, exact.
      comm->reduce_scatter(out, input.mul(2 * n), ReduceOp::avg, "t");
      expect_equal(problems[r], std::string(c10::toString(dtype)) + " avg", out,
                   longs({2 * sums[0], 2 * sums[1]}, dtype));
    }
  });
  expect_no_problems(problems);
}

TEST_P(CollectiveKindsTest, UnevenAllToAllAfterItsCounts) {
  const int n = GetParam();
  Problems problems(n);
  // Rank r sends (r + q) % 3 rows of 2 to rank q: uneven, some empty. Row j to q: 100 r + 10 q + j.
  const auto rows = [](int from, int to) { return int64_t{(from + to) % 3}; };
  run_communicators(n, [&](std::shared_ptr<Communicator>& comm, int r) {
    for (const auto dtype : kDtypes) {
      std::vector<int64_t> splits, values, expected;
      for (int q = 0; q < n; ++q) {
        splits.push_back(rows(r, q));
        for (int j = 0; j < rows(r, q); ++j)
          values.insert(values.end(), {100 * r + 10 * q + j, -(100 * r + 10 * q + j)});
        for (int j = 0; j < rows(q, r); ++j)
          expected.insert(expected.end(), {100 * q + 10 * r + j, -(100 * q + 10 * r + j)});
      }
      const torch::Tensor in = longs(values, dtype).reshape({-1, 2});
      std::vector<CollectiveSample> samples;
      const torch::Tensor out = comm->all_to_all_uneven(in, splits, "dispatch", &samples);
      expect_equal(problems[r], c10::toString(dtype), out, longs(expected, dtype).reshape({-1, 2}));
      if (samples.size() != 2 || samples[0].op != "dispatch_counts" || samples[1].op != "dispatch")
        problems[r].push_back("the counts' all-to-all and the rows' are not both sampled");
    }
  });
  expect_no_problems(problems);
}

TEST_P(CollectiveKindsTest, BroadcastFromEveryRoot) {
  const int n = GetParam();
  Problems problems(n);
  run_communicators(n, [&](std::shared_ptr<Communicator>& comm, int r) {
    for (const auto dtype : kDtypes) {
      for (int root = 0; root < n; ++root) {
        torch::Tensor t = longs({7 * r + 1, -3 * r}, dtype);
        comm->broadcast(t, root, "t");
        expect_equal(problems[r], fmt::format("{} root {}", c10::toString(dtype), root), t,
                     longs({7 * root + 1, -3 * root}, dtype));
      }
    }
  });
  expect_no_problems(problems);
}

INSTANTIATE_TEST_SUITE_P(Worlds, CollectiveKindsTest, ::testing::Values(2, 4, 8));

// What ran is named where it ran (the Communicator), not parsed from the op label: the training
// collectives table (reports/training_collectives.hpp) groups by it.
TEST(CollectiveSampleTest, NamesItsKindReduceOpDtypeAndGroup) {
  Problems problems(2);
  run_communicators(2, [&](std::shared_ptr<Communicator>& comm, int r) {
    const auto expect = [&](const CollectiveSample& c, const std::string& kind, const std::string& reduce_op,
                            const std::string& dtype, const std::string& group) {
      const std::string got = fmt::format("{} {} '{}' {} {}", c.op, c.kind, c.reduce_op, c.dtype, c.group);
      if (got != fmt::format("{} {} '{}' {} {}", c.op, kind, reduce_op, dtype, group)) problems[r].push_back(got);
    };
    torch::Tensor bf16 = torch::ones({4}, torch::kBFloat16);
    expect(comm->all_reduce(bf16, ReduceOp::avg, "a"), "all_reduce", "avg", "BFloat16", "world");
    torch::Tensor gathered = torch::empty({4}, torch::kFloat);
    expect(comm->all_gather_into(gathered, torch::ones({2}), "b"), "all_gather", "", "Float", "world");
    torch::Tensor mine = torch::empty({1}, torch::kLong);
    expect(comm->reduce_scatter(mine, torch::ones({2}, torch::kLong), ReduceOp::sum, "c"), "reduce_scatter", "sum",
           "Long", "world");
    std::vector<CollectiveSample> moved;
    comm->all_to_all_uneven(torch::ones({2, 3}), {1, 1}, "d", &moved);
    if (moved.size() == 2) {
      expect(moved[0], "all_to_all", "", "Long", "world");  // the row counts
      expect(moved[1], "all_to_all", "", "Float", "world");
    } else {
      problems[r].push_back("all_to_all_uneven: not two samples");
    }
    torch::Tensor half = torch::ones({2}, torch::kHalf);
    expect(comm->broadcast(half, 0, "e"), "broadcast", "", "Half", "world");
    std::unique_ptr<Communicator> tp = comm->split("tp", {0, 1});
    torch::Tensor t = torch::ones({3});
    expect(tp->all_reduce_sum(t, "f"), "all_reduce", "sum", "Float", "tp");
  });
  expect_no_problems(problems);
}

// The emulation choice is one table: RCCL does everything natively; Gloo emulates what the
// libtorch it is built with lacks.
TEST(CollectiveRouteTest, RcclNativeGlooEmulatesWhatItLacks) {
  for (const auto kind : every_collective_kind()) {
    for (const auto reduce : {ReduceOp::sum, ReduceOp::avg}) {
      const CollectiveRoute rccl = route_collective("rccl", kind, reduce, torch::kBFloat16);
      EXPECT_TRUE(rccl.native && !rccl.carried_as && !rccl.sum_then_divide) << to_string(kind);
      EXPECT_EQ(rccl.how, "native");
    }
  }
  const CollectiveRoute rs = route_collective("gloo", CollectiveKind::reduce_scatter, ReduceOp::avg, torch::kFloat);
  EXPECT_FALSE(rs.native);
  EXPECT_TRUE(rs.sum_then_divide);
  EXPECT_NE(rs.how.find("all-reduce of a copy of the input"), std::string::npos) << rs.how;
  EXPECT_TRUE(route_collective("gloo", CollectiveKind::all_to_all, ReduceOp::sum, torch::kFloat).native);
  const CollectiveRoute bf16_sum =
      route_collective("gloo", CollectiveKind::all_reduce, ReduceOp::sum, torch::kBFloat16);
  const CollectiveRoute bf16_move =
      route_collective("gloo", CollectiveKind::broadcast, ReduceOp::sum, torch::kBFloat16);
#if TORCH_VERSION_MAJOR >= 2
  EXPECT_FALSE(bf16_sum.carried_as.has_value());
  EXPECT_TRUE(route_collective("gloo", CollectiveKind::all_gather, ReduceOp::sum, torch::kFloat).native);
#else
  EXPECT_EQ(bf16_sum.carried_as, torch::kFloat);
  EXPECT_FALSE(bf16_sum.reinterpreted);
  EXPECT_EQ(bf16_move.carried_as, torch::kHalf);
  EXPECT_TRUE(bf16_move.reinterpreted);
  EXPECT_FALSE(route_collective("gloo", CollectiveKind::all_gather, ReduceOp::sum, torch::kFloat).native);
#endif
}

// docs/extending.md, "Adding a collective kind": every kind declared has battery cases (run
// against exact values below and by the collective check), and the one reduce rule decides
// where its op is named and how Gloo carries its bf16.
TEST(CollectiveKindList, EveryKindIsInTheBatteryAndFollowsTheReduceRule) {
  const auto kinds = every_collective_kind();
  ASSERT_GE(kinds.size(), 5u);  // the five of communicator.hpp, and any added since
  EXPECT_TRUE(is_reduction(CollectiveKind::all_reduce));
  EXPECT_TRUE(is_reduction(CollectiveKind::reduce_scatter));
  const auto cases = battery_cases(battery_sizes(int64_t{32} << 10));
  for (const auto kind : kinds) {
    const std::string name = to_string(kind);
    std::set<ReduceOp> ops;
    for (const auto& c : cases) {
      if (c.kind != kind) continue;
      ops.insert(c.reduce);
      const std::string named = name + (is_reduction(kind) ? "/" + to_string(c.reduce) : "") + "/";
      EXPECT_EQ(c.name().rfind(named, 0), 0u) << c.name() << " does not start with " << named;
    }
    EXPECT_FALSE(ops.empty()) << name << " has no battery case";
    if (!is_reduction(kind)) EXPECT_EQ(ops, std::set<ReduceOp>{ReduceOp::sum}) << name << ": only moves data";
#if TORCH_VERSION_MAJOR < 2
    // 1.13's Gloo has no bf16: a reduction computes in fp32, data movement carries the 16 bits.
    const CollectiveRoute bf16 = route_collective("gloo", kind, ReduceOp::sum, torch::kBFloat16);
    EXPECT_EQ(bf16.carried_as, is_reduction(kind) ? torch::kFloat : torch::kHalf) << name;
#endif
  }
}

TEST(CollectiveBatteryTest, SizesCrossTheProtocolThresholdsAndInputsStayExactInBf16) {
  EXPECT_EQ(battery_sizes(int64_t{16} << 20),
            (std::vector<int64_t>{int64_t{32} << 10, int64_t{1} << 20, int64_t{3} << 20, int64_t{12} << 20}));
  EXPECT_EQ(battery_sizes(int64_t{1} << 20), (std::vector<int64_t>{int64_t{32} << 10, int64_t{1} << 20}));
  for (const int world : {2, 8, 64}) {
    torch::Tensor sum = torch::zeros({4096}, torch::kLong);
    for (int r = 0; r < world; ++r) sum += battery_values(7, r, world, 0, 4096);
    EXPECT_LT(sum.max().item<int64_t>(), 256) << world;  // every integer below 256 is exact in bf16
    EXPECT_FALSE(torch::equal(battery_values(7, 0, world, 0, 64), battery_values(8, 0, world, 0, 64)));
    EXPECT_FALSE(torch::equal(battery_values(7, 0, world, 0, 64), battery_values(7, 1, world, 0, 64)));
  }
  // Uneven splits, weights 1..3, about `numel` in all.
  EXPECT_NE(all_to_all_split(0, 0, 4, 800), all_to_all_split(0, 1, 4, 800));
}

constexpr int64_t kSmallBattery = int64_t{1} << 20;  // 32 KiB and 1 MiB: CPU-sized

TEST(CollectiveBatteryTest, CleanBatteryIsExactOverSeedsAndWorlds) {
  torch::set_num_threads(1);
  const auto cases = battery_cases(battery_sizes(kSmallBattery));
  for (const int world : {2, 4}) {
    for (const uint64_t seed : {1u, 2u, 3u}) {
      std::vector<CollectiveBatteryResult> results(world);
      run_ranks(world, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
        results[r] = CrossRankChecks(sync).run_collective_battery(cases, seed);
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(results[r].findings.empty())
            << "world " << world << " seed " << seed << ": " << results[r].findings[0].message;
        ASSERT_EQ(results[r].rows.size(), cases.size());
        for (const auto& row : results[r].rows) {
          EXPECT_TRUE(row.wrong_ranks.empty()) << row.c.name();
          EXPECT_GT(row.bus_bandwidth_gbps, 0.0) << row.c.name();
          // Every rank reports the same time: the slowest rank's.
          EXPECT_EQ(row.seconds, results[0].rows[&row - results[r].rows.data()].seconds);
        }
      }
    }
  }
}

TEST(CollectiveBatteryTest, WrongShardFromOneRankIsNamedOnEveryRank) {
  torch::set_num_threads(1);
  const int world = 4, culprit = 2;
  const auto cases = battery_cases(battery_sizes(int64_t{32} << 10));
  std::vector<CollectiveBatteryResult> results(world);
  run_ranks(world, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    results[r] = CrossRankChecks(sync).run_collective_battery(cases, 5, {.wrong_shard = r == culprit});
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(results[r].findings.size(), 1u) << "rank " << r;
    const Finding& f = results[r].findings[0];
    EXPECT_EQ(f.signature, "collective_result_mismatch");
    EXPECT_EQ(f.component, component::rccl);
    EXPECT_EQ(f.severity, Severity::fail);
    for (const auto& row : results[r].rows) {
      const bool planted = row.c.kind == CollectiveKind::all_gather || row.c.kind == CollectiveKind::reduce_scatter;
      EXPECT_EQ(row.wrong_ranks.empty(), !planted) << row.c.name();
    }
    for (const auto& wrong : f.evidence["wrong"]) {
      if (wrong["kind"] == "all_gather") {
        EXPECT_EQ(wrong["source_rank"], culprit) << wrong.dump();
        EXPECT_EQ(wrong["wrong_ranks"], nlohmann::json({0, 1, 2, 3}));
        EXPECT_EQ(wrong["got"].get<double>(), wrong["expected"].get<double>() + 1.0);
      } else {
        EXPECT_EQ(wrong["kind"], "reduce_scatter");
        EXPECT_EQ(wrong["wrong_ranks"], nlohmann::json({0, 1, 2, 3}));
      }
    }
    EXPECT_EQ(f.evidence["wrong"].size(), 7u);  // all-gather x 3 dtypes, reduce-scatter x 2 ops x 2 dtypes
    EXPECT_NE(f.message.find("rank 2's data came back wrong"), std::string::npos) << f.message;
  }
}

TEST(CollectiveBatteryTest, StallBeforeReduceScatterTimesOutNamingTheCollectiveGroupAndRank) {
  torch::set_num_threads(1);
  const int world = 3, culprit = 1;
  const double timeout_s = 2.0;
  const auto cases = battery_cases(battery_sizes(int64_t{32} << 10));
  std::vector<std::optional<CollectiveError>> errors(world);
  run_ranks(
      world,
      [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
        try {
          CrossRankChecks(sync).run_collective_battery(
              cases, 9, {.stall_before_reduce_scatter_s = r == culprit ? 2.5 * timeout_s : 0});
        } catch (const CollectiveError& e) {
          errors[r] = e;
        }
      },
      timeout_s);
  for (int r = 0; r < world; ++r) {
    if (r == culprit) continue;
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    const Finding& f = errors[r]->finding();
    EXPECT_EQ(f.signature, "collective_timeout") << f.message;
    EXPECT_EQ(f.evidence["kind"], "reduce_scatter");
    EXPECT_EQ(f.evidence["group"], "world");
    EXPECT_EQ(f.evidence["missing_ranks"], nlohmann::json({culprit})) << f.message;
    EXPECT_NE(f.message.find("(reduce_scatter in group 'world' of 3 ranks)"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("rank 1 never entered it"), std::string::npos) << f.message;
  }
}

// The battery as the comm mode's check: before step 1 and every `interval` steps, through the
// fault plan as a run wires it. Returns each rank's findings and report section.
struct CheckedRun {
  std::vector<std::vector<Finding>> findings;
  std::vector<nlohmann::json> sections;
};

CheckedRun run_check(int world, int steps, const std::string& inject, uint64_t seed) {
  CheckedRun run{std::vector<std::vector<Finding>>(world), std::vector<nlohmann::json>(world)};
  const FaultPlan faults = FaultPlan::parse(inject);
  DiagnosticsConfig diag;
  TrainingConfig cfg;
  cfg.collective_check_interval = 1;
  cfg.collective_check_max_mb = 0.05;  // the 32 KiB size only: CPU-sized
  cfg.seed = seed;
  run_ranks(world, [&](std::shared_ptr<ProcessGroupSync>& sync, int r) {
    FindingLog log(find_signature);
    CollectiveCheck check(diag, log, sync, CollectiveCheckOptions::from(cfg, diag, /*shared_cores=*/true), &faults);
    check.preflight();
    for (int step = 1; step <= steps; ++step) {
      sync->begin_step(step);
      StepRecord record;
      record.step = step;
      record.rank = r;
      check.on_step(record);
    }
    run.findings[r] = log.snapshot();
    run.sections[r] = check.report_sections();
  });
  return run;
}

TEST(CollectiveCheckTest, CleanBatteriesStaySilentAndFillTheCollectivesTable) {
  torch::set_num_threads(1);
  std::map<std::string, bool> reduces;  // by report.json's kind name
  for (const auto kind : every_collective_kind()) reduces[to_string(kind)] = is_reduction(kind);
  for (const int world : {2, 4}) {
    for (const uint64_t seed : {11u, 12u}) {
      const CheckedRun run = run_check(world, 4, "", seed);
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(run.findings[r].empty())
            << "world " << world << " seed " << seed << " rank " << r << ": " << run.findings[r][0].message;
        const auto& table = run.sections[r]["collectives"];
        EXPECT_EQ(table["batteries"], 5);
        ASSERT_EQ(table["cases"].size(), battery_cases({int64_t{32} << 10}).size());
        std::set<std::string> kinds_in_table;
        for (const auto& row : table["cases"]) {
          kinds_in_table.insert(row["kind"].get<std::string>());
          // A row names its op exactly when its kind reduces.
          EXPECT_EQ(row["reduce_op"] != "", reduces.at(row["kind"].get<std::string>())) << row.dump();
          EXPECT_TRUE(row["verified"].get<bool>()) << row.dump();
          EXPECT_EQ(row["runs"], 5);
          EXPECT_GT(row["bus_bandwidth_gbps"].get<double>(), 0.0) << row.dump();
          EXPECT_EQ(row["latency_history_s"].size(), 5u);
        }
        EXPECT_EQ(kinds_in_table.size(), reduces.size()) << "every kind has a row";
      }
    }
  }
}

TEST(CollectiveCheckTest, SlowAllToAllFromOneRankIsNamedOnEveryRank) {
  torch::set_num_threads(1);
  const int world = 4;
  const CheckedRun run = run_check(world, 4, "slow-all-to-all=0.5@step=4@rank=1", 21);
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(run.findings[r].size(), 1u) << "rank " << r;
    const Finding& f = run.findings[r][0];
    EXPECT_EQ(f.signature, "collective_slow");
    EXPECT_EQ(f.component, component::rccl);
    EXPECT_EQ(f.severity, Severity::warn);
    EXPECT_EQ(f.step, 4);
    ASSERT_EQ(f.evidence["slow"].size(), 3u) << f.message;  // the all-to-all in fp32, bf16 and int64
    for (const auto& slow : f.evidence["slow"]) EXPECT_EQ(slow["kind"], "all_to_all") << f.message;
  }
}

TEST(CollectiveCheckTest, CorruptShardThroughTheFaultPlanFailsTheTable) {
  torch::set_num_threads(1);
  const int world = 2;
  const CheckedRun run = run_check(world, 2, "collective-corrupt@step=2@rank=1", 31);
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(run.findings[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(run.findings[r][0].signature, "collective_result_mismatch");
    EXPECT_EQ(run.findings[r][0].step, 2);
    for (const auto& row : run.sections[r]["collectives"]["cases"]) {
      const bool planted = row["kind"] == "all_gather" || row["kind"] == "reduce_scatter";
      EXPECT_EQ(row["verified"].get<bool>(), !planted) << row.dump();
    }
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
