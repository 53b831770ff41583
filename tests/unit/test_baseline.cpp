// --baseline comparison (identical runs silent; perturbed losses, step times, memory, op counts
// and new findings fire) and the OpCounter that produces the per-step op fingerprint.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/detectors/op_counter.hpp"
#include "rocm_conformance_llm/reports/baseline.hpp"
#include "rocm_conformance_llm/reports/metrics_writer.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
namespace fs = std::filesystem;

// A small training-like step: two linear layers, a nonlinearity, backward.
OpCounts fingerprint_of_step(bool use_gelu) {
  torch::manual_seed(0);
  auto w1 = torch::randn({16, 8}, torch::requires_grad());
  auto w2 = torch::randn({4, 16}, torch::requires_grad());
  OpCounter counter;
  const auto x = torch::randn({32, 8});
  auto h = torch::mm(x, w1.t());
  h = use_gelu ? torch::gelu(h) : torch::relu(h);
  const auto loss = torch::mm(h, w2.t()).pow(2).mean();
  loss.backward();
  counter.stop();
  return counter.counts();
}

TEST(OpCounter, CountsDispatchedAtenOpsIncludingBackward) {
  const auto counts = fingerprint_of_step(false);
  ASSERT_TRUE(counts.count("aten::mm"));
  EXPECT_GE(counts.at("aten::mm"), 2 + 3);  // two forward GEMMs, at least three in backward
  EXPECT_TRUE(counts.count("aten::relu"));
  EXPECT_FALSE(counts.count("aten::gelu"));
}

TEST(OpCounter, SameStepSameFingerprintDifferentPathDifferentFingerprint) {
  EXPECT_EQ(fingerprint_of_step(false), fingerprint_of_step(false));
  EXPECT_NE(fingerprint_of_step(false), fingerprint_of_step(true));
}

TEST(OpCounter, StopsCountingAndAllowsOneAtATime) {
  OpCounter counter;
  EXPECT_THROW(OpCounter second, std::logic_error);
  torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
  counter.stop();
  const auto counts = counter.counts();
  torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
  EXPECT_EQ(counter.counts(), counts) << "no counting after stop()";
  EXPECT_EQ(counts.at("aten::mm"), 1);
}

TEST(Baseline, MetricsJsonRoundTripsThroughTheMetricsWriterFormat) {
  StepRecord r;
  r.step = 12;
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.step_time_s = 0.25;
  r.tokens = 4096;
  r.memory = MemorySample{
      .allocated_bytes = 10, .reserved_bytes = 20, .peak_allocated_bytes = 15, .rss_bytes = 30, .source = "hip"};
  r.op_counts = {{"aten::mm", 12}, {"aten::add", 3}};
  const auto back = step_record_from_metrics_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_EQ(back.step, 12);
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_EQ(back.step_time_s, 0.25);
  EXPECT_EQ(back.tokens, 4096);
  EXPECT_EQ(back.memory.peak_allocated_bytes, 15);
  EXPECT_EQ(back.memory.source, "hip");
  EXPECT_EQ(back.op_counts, r.op_counts);
}

std::vector<StepRecord> run_steps(int64_t n = 30) {
  std::vector<StepRecord> out;
  for (int64_t s = 1; s <= n; ++s) {
    StepRecord r;
    r.step = s;
    r.loss = 2.0 + 3.0 / static_cast<double>(s) + 1e-7 * std::sin(static_cast<double>(s));  // not round numbers
    r.step_time_s = 0.1 + 0.001 * static_cast<double>(s % 3);
    r.tokens = 512;
    r.memory = MemorySample{.allocated_bytes = 400 << 20,
                            .reserved_bytes = 900 << 20,
                            .peak_allocated_bytes = 800 << 20,
                            .rss_bytes = 1 << 30,
                            .source = "hip"};
    r.op_counts = {{"aten::mm", 40}, {"aten::gelu", 4}, {"aten::add", 30}};
    out.push_back(r);
  }
  return out;
}

nlohmann::json config_doc(bool deterministic, int64_t hidden = 128) {
  return {{"training", {{"hidden_size", hidden}, {"deterministic", deterministic}, {"seed", 1234}, {"steps", 30}}},
          {"diagnostics", nlohmann::json(DiagnosticsConfig{})}};
}

// Writes a run directory the way the real run does: metrics.jsonl through MetricsWriter,
// report.json through ReportWriter.
fs::path write_run(const std::string& name, const std::vector<StepRecord>& steps, const nlohmann::json& config,
                   const std::vector<Finding>& findings = {}) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("rcl_baseline_" + name);
  fs::remove_all(dir);
  {
    MetricsWriter metrics(dir, 0, {"gemm"});
    for (const auto& r : steps) metrics.write(r);
  }
  FindingLog log(find_signature);
  for (const auto& f : findings) log.add(f);
  RunSummary summary;
  for (const auto& r : steps) summary.on_step(r);
  ReportWriter(dir, 0, config, {}, log, summary, 5).write(RunOutcome::completed);
  return dir;
}

RunRecord record_now(const std::vector<StepRecord>& steps, const nlohmann::json& config,
                     const std::vector<Finding>& findings = {}) {
  RunSummary summary;
  for (const auto& r : steps) summary.on_step(r);
  return RunRecord{summary.steps(), findings, config};
}

std::vector<Finding> only(const BaselineComparison& c, const std::string& signature) {
  std::vector<Finding> out;
  for (const auto& f : c.findings)
    if (f.signature == signature) out.push_back(f);
  return out;
}

TEST(Baseline, IdenticalRunsAreSilentBitwise) {
  const auto steps = run_steps();
  const auto then = load_run_record(write_run("identical", steps, config_doc(true)));
  ASSERT_EQ(then.steps.size(), 30u);
  const auto c = compare_with_baseline(record_now(steps, config_doc(true)), then, DiagnosticsConfig{}, 0);
  EXPECT_TRUE(c.findings.empty()) << nlohmann::json(c.summary).dump();
  EXPECT_EQ(c.summary["comparable"], true);
  EXPECT_EQ(c.summary["loss"]["mode"], "bitwise");
  EXPECT_EQ(c.summary["steps_compared"], 30);
  EXPECT_EQ(c.summary["fingerprint_steps_compared"], 30);
  EXPECT_DOUBLE_EQ(c.summary["step_time_median_ratio"].get<double>(), 1.0);
}

TEST(Baseline, OneUlpLossDifferenceFailsInDeterministicModeOnly) {
  const auto steps = run_steps();
  auto perturbed = steps;
  perturbed[16].loss = std::nextafter(perturbed[16].loss, 100.0);  // step 17
  perturbed[20].loss *= 1.05;                                      // step 21

  const auto det = load_run_record(write_run("det", steps, config_doc(true)));
  auto c = compare_with_baseline(record_now(perturbed, config_doc(true)), det, DiagnosticsConfig{}, 0);
  auto f = only(c, "loss_mismatch_vs_baseline");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].step, 17);
  EXPECT_EQ(f[0].severity, Severity::fail);
  EXPECT_EQ(f[0].component, component::rocblas);
  EXPECT_EQ(c.summary["loss"]["first_differing_step"], 17);

  const auto nondet = load_run_record(write_run("nondet", steps, config_doc(false)));
  c = compare_with_baseline(record_now(perturbed, config_doc(false)), nondet, DiagnosticsConfig{}, 0);
  f = only(c, "loss_mismatch_vs_baseline");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].step, 21) << "a one-ulp difference is within tolerance; 5% is not";
  EXPECT_EQ(f[0].severity, Severity::warn);
}

// determinism=all compares bitwise as deterministic=true does; determinism=replay (the rng mode's:
// deterministic algorithms only around the replayed steps) compares within the tolerance.
TEST(Baseline, OnlyDeterminismAllComparesBitwise) {
  const auto steps = run_steps();
  auto perturbed = steps;
  perturbed[16].loss = std::nextafter(perturbed[16].loss, 100.0);  // step 17
  for (const auto& [level, bitwise] : {std::pair{"all", true}, std::pair{"replay", false}}) {
    auto doc = config_doc(false);
    doc["training"]["determinism"] = level;
    const auto then = load_run_record(write_run(std::string("level-") + level, steps, doc));
    const auto c = compare_with_baseline(record_now(perturbed, doc), then, DiagnosticsConfig{}, 0);
    EXPECT_EQ(only(c, "loss_mismatch_vs_baseline").size(), bitwise ? 1u : 0u) << level;
  }
}

TEST(Baseline, SlowerStepsMoreMemoryAndChangedOpCountsFire) {
  const auto steps = run_steps();
  const auto then = load_run_record(write_run("perf", steps, config_doc(false)));
  auto now = steps;
  for (auto& r : now) {
    r.step_time_s *= 2.0;
    r.memory.peak_allocated_bytes = r.memory.peak_allocated_bytes / 2 * 3;
  }
  now[2].op_counts["aten::gelu"] = 5;  // step 3
  now[2].op_counts["aten::_fused_layer_norm"] = 1;
  const auto c = compare_with_baseline(record_now(now, config_doc(false)), then, DiagnosticsConfig{}, 1);

  const auto perf = only(c, "step_time_regression_vs_baseline");
  ASSERT_EQ(perf.size(), 1u);
  EXPECT_EQ(perf[0].component, component::miopen);
  EXPECT_NEAR(perf[0].evidence["ratio"].get<double>(), 2.0, 1e-9);
  EXPECT_EQ(perf[0].rank, 1);

  const auto mem = only(c, "peak_memory_regression_vs_baseline");
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_EQ(mem[0].component, component::allocator);
  EXPECT_NEAR(mem[0].evidence["ratio"].get<double>(), 1.5, 1e-9);

  const auto ops = only(c, "op_fingerprint_changed");
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].component, component::miopen);
  EXPECT_EQ(ops[0].step, 3);
  EXPECT_EQ(ops[0].evidence["differences"]["aten::gelu"], nlohmann::json({{"now", 5}, {"baseline", 4}}));
  EXPECT_EQ(ops[0].evidence["differences"]["aten::_fused_layer_norm"], nlohmann::json({{"now", 1}, {"baseline", 0}}));
  EXPECT_TRUE(only(c, "loss_mismatch_vs_baseline").empty());
}

TEST(Baseline, FindingsPresentNowButNotThenAreFlagged) {
  const auto steps = run_steps();
  const Finding old_one{.component = component::miopen,
                        .signature = "slow_first_step",
                        .severity = Severity::info,
                        .step = 1,
                        .rank = 0,
                        .message = "",
                        .evidence = {}};
  const Finding new_one{.component = component::rccl,
                        .signature = "collective_latency_spike",
                        .severity = Severity::warn,
                        .step = 14,
                        .rank = 0,
                        .message = "",
                        .evidence = {}};
  const auto then = load_run_record(write_run("findings", steps, config_doc(false), {old_one}));
  ASSERT_EQ(then.findings.size(), 1u);
  const auto c = compare_with_baseline(record_now(steps, config_doc(false), {old_one, new_one, new_one}), then,
                                       DiagnosticsConfig{}, 0);
  ASSERT_EQ(c.findings.size(), 1u);
  EXPECT_EQ(c.findings[0].signature, "new_finding_vs_baseline");
  EXPECT_EQ(c.findings[0].component, component::rccl);
  EXPECT_EQ(c.findings[0].step, 14);
  EXPECT_EQ(c.findings[0].evidence["signature"], "collective_latency_spike");
}

TEST(Baseline, DifferentConfigurationsAreNotCompared) {
  const auto steps = run_steps();
  const auto then = load_run_record(write_run("othercfg", steps, config_doc(false, 256)));
  auto now = steps;
  for (auto& r : now) r.loss += 1.0;
  auto longer = config_doc(false);
  longer["training"]["steps"] = 500;  // run length alone does not make runs incomparable
  const auto c = compare_with_baseline(record_now(now, longer), then, DiagnosticsConfig{}, 0);
  EXPECT_TRUE(c.findings.empty());
  EXPECT_EQ(c.summary["comparable"], false);
  EXPECT_EQ(c.summary["config_differences"], nlohmann::json({"hidden_size"}));
}

// A baseline written before a training field existed lacks its key: it ran as the default, so
// it stays comparable with a run at that default, and not with one that changed it.
TEST(Baseline, AKeyTheBaselineLacksCountsAsItsDefault) {
  const auto steps = run_steps();
  const auto then = load_run_record(write_run("olderfields", steps, config_doc(false)));  // no init_std
  auto current = config_doc(false);
  current["training"]["init_std"] = TrainingConfig{}.init_std;
  EXPECT_EQ(compare_with_baseline(record_now(steps, current), then, DiagnosticsConfig{}, 0)
                .summary["comparable"],
            true);
  auto changed = config_doc(false);
  changed["training"]["init_std"] = 0.01;
  const auto c = compare_with_baseline(record_now(steps, changed), then, DiagnosticsConfig{}, 0);
  EXPECT_EQ(c.summary["config_differences"], nlohmann::json({"init_std"}));
}

TEST(Baseline, MissingOrBrokenBaselineDirectoriesAreConfigErrors) {
  EXPECT_THROW(load_run_record(fs::path(::testing::TempDir()) / "rcl_no_such_run"), ConfigError);

  const fs::path dir = write_run("truncated", run_steps(5), config_doc(false));
  {
    std::ofstream append(dir / "metrics.jsonl", std::ios::app);
    append << "{\"step\": 6, \"loss\": 2.";  // the run died mid-line
  }
  EXPECT_EQ(load_run_record(dir).steps.size(), 5u);
  {
    std::ofstream broken(dir / "metrics.jsonl");
    broken << "not json\n{\"step\": 1, \"loss\": 2.0}\n";
  }
  EXPECT_THROW(load_run_record(dir), ConfigError);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
