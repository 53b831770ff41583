// Active checks the trainer calls: GEMM canaries, non-finite localisation and fp32
// re-classification, rocRAND replay / mask checks, and the crash-message classifier.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/anomaly_rerun.hpp"
#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"
#include "rocm_conformance_llm/checks/detectors/numerics.hpp"
#include "rocm_conformance_llm/checks/detectors/rng_checks.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/checks/monitors/error_classifier.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

const torch::Device kCpu(torch::kCPU);

std::vector<CanaryShape> canary_shapes(torch::ScalarType dtype) {
  TrainingConfig cfg;
  cfg.hidden_size = 64;
  cfg.batch_size = 4;
  cfg.seq_len = 48;  // 192 tokens
  cfg.vocab_size = 300;
  cfg.mixed_precision = dtype == torch::kBFloat16 ? Precision::bf16 : Precision::fp32;
  auto shapes = model_gemm_shapes(cfg);
  shapes.push_back({"odd_tt", 37, 53, 700, true, true, dtype});  // ragged sizes, both transposed
  return shapes;
}

TEST(GemmCanary, ModelShapesFollowTheConfig) {
  TrainingConfig cfg;
  cfg.hidden_size = 128;
  cfg.ffn_multiplier = 4.0;
  cfg.batch_size = 64;
  cfg.seq_len = 512;
  cfg.activation = Activation::swiglu;
  cfg.mixed_precision = Precision::bf16;
  cfg.vocab_size = 50000;
  const auto shapes = model_gemm_shapes(cfg);
  ASSERT_EQ(shapes.size(), 6u);
  for (const auto& s : shapes) EXPECT_EQ(s.dtype, torch::kBFloat16) << s.to_string();
  EXPECT_EQ(shapes[0].to_string(), "qkv_proj 1024x384x128 NT bf16");  // tokens capped at 1024
  EXPECT_EQ(shapes[2].n, 2 * ffn_hidden_size(cfg));                   // SwiGLU: gate + value
  EXPECT_EQ(shapes[3].k, ffn_hidden_size(cfg));                       // the model's width, not 4x
  EXPECT_EQ(shapes[5].n, 8192);                                       // LM head capped
}

TEST(GemmCanary, TolerancesFollowTheDtypeAndGrowWithK) {
  const auto fp32 = gemm_tolerance(torch::kFloat, 256), bf16 = gemm_tolerance(torch::kBFloat16, 256),
             fp16 = gemm_tolerance(torch::kHalf, 256);
  EXPECT_LT(fp32.relative_fro, fp16.relative_fro);
  EXPECT_LT(fp16.relative_fro, bf16.relative_fro);
  EXPECT_LT(gemm_tolerance(torch::kFloat, 64).relative_fro, gemm_tolerance(torch::kFloat, 65536).relative_fro);
  EXPECT_NEAR(bf16.relative_fro, 8.0 / 256.0, 1e-3);  // dominated by the output rounding
}

class GemmCanaryDtypes : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(GemmCanaryDtypes, CleanDeviceIsSilentAndCorruptionFires) {
  GemmCanary canary(canary_shapes(GetParam()), kCpu);
  FindingLog log(find_signature);
  if (!gemm_sums_in_float32(GetParam(), kCpu)) {
    // A CPU whose kernel sums in the dtype (libtorch 1.13's bf16 without AVX512): no shape is
    // judged against the fp32-sum tolerance, so none passes and none fails, fault or not.
    for (const auto& r : canary.run(25, 0, log, CanaryFault::persistent)) EXPECT_FALSE(r.supported);
    EXPECT_EQ(log.size(), 0u);
    return;
  }
  for (const auto& r : canary.run(25, 0, log)) {
    EXPECT_TRUE(r.supported) << r.shape.to_string();
    EXPECT_TRUE(r.passed()) << r.shape.to_string() << " rel " << r.relative_fro_error << " max "
                            << r.max_elementwise_error;
    // Honest rounding sits well inside the tolerance: the margin the header promises.
    EXPECT_LT(r.relative_fro_error, r.tolerance.relative_fro / 3) << r.shape.to_string();
  }
  EXPECT_EQ(log.size(), 0u);

  const auto results = canary.run(50, 1, log, CanaryFault::persistent);
  EXPECT_FALSE(results[0].passed());
  for (size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(results[i].passed()) << results[i].shape.to_string();
  const auto findings = log.snapshot();
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].component, component::rocblas);
  EXPECT_EQ(findings[0].signature, "gemm_wrong_result");
  EXPECT_EQ(findings[0].severity, Severity::fail);
  EXPECT_EQ(findings[0].step, 50);
  EXPECT_EQ(findings[0].rank, 1);
  EXPECT_EQ(findings[0].evidence["shape"]["label"], "qkv_proj");
  EXPECT_EQ(findings[0].evidence["injected_fault"], true);
  // Wrong again when run again, and in float32 too: the library's result, persistent.
  EXPECT_EQ(findings[0].reproducible, true);
  EXPECT_EQ(findings[0].classification, Classification::persistent);
  EXPECT_EQ(action_of(findings[0]), Action::isolate_node);

  canary.run(75, 1, log, CanaryFault::persistent);
  EXPECT_EQ(log.size(), 1u) << "the same bad shape is reported once";
}

// A wrong result its re-run does not repeat is transient: a warn with action rerun; a second
// one in the same run is intermittent: fail, isolate the node.
TEST(GemmCanary, AOneOffWrongResultIsTransientAndASecondFails) {
  GemmCanary canary(canary_shapes(torch::kFloat), kCpu);
  FindingLog log(find_signature);
  canary.run(5, 0, log, CanaryFault::once);
  ASSERT_EQ(log.size(), 1u);
  const Finding first = log.snapshot()[0];
  EXPECT_EQ(first.signature, "gemm_wrong_result");
  EXPECT_EQ(first.severity, Severity::warn);
  EXPECT_EQ(first.classification, Classification::transient);
  EXPECT_EQ(first.reproducible, false);
  EXPECT_EQ(action_of(first), Action::rerun);

  canary.run(10, 0, log, CanaryFault::none);
  EXPECT_EQ(log.size(), 1u) << "a clean canary adds nothing";
  canary.run(15, 0, log, CanaryFault::once);
  ASSERT_EQ(log.size(), 2u);
  const Finding second = log.snapshot()[1];
  EXPECT_EQ(second.severity, Severity::fail);
  EXPECT_EQ(second.classification, Classification::transient);
  EXPECT_EQ(action_of(second), Action::isolate_node);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmCanaryDtypes, ::testing::Values(torch::kFloat, torch::kBFloat16));

TEST(GemmCanary, FiniteInNonFiniteOutFails) {
  const CanaryShape shape{"split_k", 8, 8, 64, false, false, torch::kBFloat16};
  const auto reference = torch::randn({8, 8}, torch::kDouble);
  auto output = reference.to(torch::kBFloat16);
  EXPECT_TRUE(judge_gemm_output(shape, output, reference).passed());
  output[3][5] = std::numeric_limits<float>::quiet_NaN();  // one unwritten / poisoned element
  const auto r = judge_gemm_output(shape, output, reference);
  EXPECT_TRUE(r.nonfinite_output);
  EXPECT_FALSE(r.passed());
}

TEST(GemmCanary, SlightlyWrongOutputFails) {
  const CanaryShape shape{"wrong", 64, 64, 64, false, true, torch::kFloat};
  const auto reference = torch::randn({64, 64}, torch::kDouble);
  auto output = reference.to(torch::kFloat);
  output[10][10] += 2.0 * output.pow(2).mean().sqrt().item<float>();  // one element 2 rms off
  EXPECT_FALSE(judge_gemm_output(shape, output, reference).passed());
}

// libtorch 1.13 has no fp16 CPU GEMM: the canary reports the shape unsupported, not failed.
// 2.x has one: the canary runs it, and it must pass. Either way, no finding.
TEST(GemmCanary, Fp16IsCheckedWhereTheDeviceHasAKernelAndReportedUnsupportedOtherwise) {
  const bool has_fp16_gemm = [] {
    try {
      const auto a = torch::ones({4, 4}, torch::kHalf);
      (void)torch::mm(a, a);
      return true;
    } catch (const c10::Error&) {
      return false;
    }
  }();
  GemmCanary canary({{"fp16", 16, 16, 16, false, true, torch::kHalf}}, kCpu);
  FindingLog log(find_signature);
  const auto results = canary.run(1, 0, log);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].supported, has_fp16_gemm);
  EXPECT_TRUE(results[0].passed());
  EXPECT_EQ(log.size(), 0u);
}

TEST(NonFiniteProbe, FirstNonFiniteBlockIsFound) {
  const auto ok = torch::ones({4});
  const auto bad = torch::tensor({1.0f, std::numeric_limits<float>::infinity()});
  const std::vector<NamedTensor> outputs = {{"embed", ok}, {"block0", ok}, {"block1", bad}, {"block2", bad * 0}};
  EXPECT_EQ(first_nonfinite(outputs), 2u);
  EXPECT_EQ(first_nonfinite({{"embed", ok}}), std::nullopt);
}

// A two-block "model" whose second block overflows fp16's range (max 65504) but not fp32's.
std::vector<NamedTensor> overflowing_forward(bool fp32, bool also_broken_in_fp32) {
  const auto dtype = fp32 ? torch::kFloat : torch::kHalf;
  const auto x = torch::full({8}, 300.0, torch::TensorOptions().dtype(dtype));
  const auto block0 = x + 1;
  auto block1 = block0 * block0;  // 90601: inf in fp16
  if (also_broken_in_fp32) block1 = block1 * std::numeric_limits<float>::quiet_NaN();
  const auto loss = block1.mean();
  return {{"block0", block0}, {"block1", block1}, {"loss", loss}};
}

TEST(NonFiniteProbe, OverflowOnlyInReducedPrecisionIsNumerics) {
  int runs = 0;
  const auto d = diagnose_nonfinite(
      [&](bool fp32) {
        ++runs;
        return overflowing_forward(fp32, false);
      },
      /*reduced_precision=*/true);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(d.classification, "numerics");
  EXPECT_EQ(d.first_nonfinite_training, "block1");
  EXPECT_FALSE(d.first_nonfinite_fp32);
  const auto f = to_finding(d, "fp16", 20, 0);
  EXPECT_EQ(f.signature, "nonfinite_reduced_precision_only");
  EXPECT_EQ(f.component, component::rocblas);
  EXPECT_EQ(f.severity, Severity::warn);
  EXPECT_EQ(f.step, 20);
  EXPECT_EQ(f.evidence["first_nonfinite_training"], "block1");
}

TEST(NonFiniteProbe, NonFiniteAlsoInFp32IsAFault) {
  const auto d = diagnose_nonfinite([](bool fp32) { return overflowing_forward(fp32, true); }, true);
  EXPECT_EQ(d.classification, "fault");
  EXPECT_EQ(d.first_nonfinite_fp32, "block1");
  const auto f = to_finding(d, "bf16", 7, 1);
  EXPECT_EQ(f.signature, "nonfinite_also_fp32");
  EXPECT_EQ(f.severity, Severity::fail);
}

TEST(NonFiniteProbe, Fp32TrainingRunsOnceAndTransientIsNotReproduced) {
  int runs = 0;
  auto d = diagnose_nonfinite(
      [&](bool fp32) {
        ++runs;
        EXPECT_TRUE(fp32);
        return overflowing_forward(true, true);
      },
      /*reduced_precision=*/false);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(d.classification, "fault");

  // The re-run under the training precision is finite: the first non-finite result was transient.
  d = diagnose_nonfinite([](bool) { return overflowing_forward(/*fp32=*/true, false); }, true);
  EXPECT_EQ(d.classification, "not_reproduced");
  EXPECT_EQ(to_finding(d, "bf16", 3, 0).signature, "nonfinite_not_reproducible");
}

// Megatron-LM's taxonomy: not reproduced on the same device is transient; gone in float32 is
// precision; also on the CPU is the job's own doing; otherwise persistent.
TEST(AnomalyRerun, ClassificationFollowsWhereTheAnomalyReproduces) {
  EXPECT_EQ(classify({.reproducible = false}), Classification::transient);
  EXPECT_EQ(classify({.reproducible = true, .also_in_fp32 = false}), Classification::precision);
  EXPECT_EQ(classify({.reproducible = true, .also_in_fp32 = true}), Classification::persistent);
  EXPECT_EQ(classify({.reproducible = true, .also_in_fp32 = true, .also_on_cpu = false}), Classification::persistent);
  EXPECT_EQ(classify({.reproducible = true, .also_in_fp32 = true, .also_on_cpu = true}), Classification::configuration);
}

TEST(AnomalyRerun, ReRunShowsASpikeWhenNearerTheSpikedValueThanTheMedian) {
  const Finding spike{.signature = "loss_spike", .evidence = {{"loss", 9.0}, {"baseline_median", 3.0}}};
  EXPECT_EQ(shows_anomaly(spike, 8.9, 1.0), true);
  EXPECT_EQ(shows_anomaly(spike, 3.2, 1.0), false);
  EXPECT_EQ(shows_anomaly(spike, std::nan(""), 1.0), true);
  const Finding norm{.signature = "grad_norm_spike", .evidence = {{"grad_norm", 1000.0}, {"baseline_median", 1.0}}};
  EXPECT_EQ(shows_anomaly(norm, 3.0, 40.0), true);   // log10: 1.6 is nearer 3 than 0
  EXPECT_EQ(shows_anomaly(norm, 3.0, 20.0), false);  // 1.3
  const Finding nonfinite{.signature = "nonfinite_loss"};
  EXPECT_EQ(shows_anomaly(nonfinite, std::numeric_limits<double>::infinity(), 1.0), true);
  EXPECT_EQ(shows_anomaly(nonfinite, 2.5, 1.0), false);
  // Not judgeable: a signature no re-run reads, a spike without its evidence.
  EXPECT_FALSE(shows_anomaly(Finding{.signature = "memory_growth"}, 1.0, 1.0).has_value());
  EXPECT_FALSE(shows_anomaly(Finding{.signature = "loss_spike"}, 1.0, 1.0).has_value());
}

// One transient per signature is a one-off; a second of the same signature in the run is an
// intermittent fault: it keeps its fail and points at the node. Persistent ones do not count.
TEST(AnomalyRerun, ARepeatedTransientIsIntermittentAndFails) {
  TransientHistory history;
  const auto wrong_gemm = [] { return Finding{.signature = "gemm_shadow_mismatch", .severity = Severity::fail}; };
  Finding persistent = wrong_gemm();
  history.apply(persistent, {.reproducible = true, .also_in_fp32 = true});
  Finding first = wrong_gemm();
  history.apply(first, {.reproducible = false});
  EXPECT_EQ(first.severity, Severity::warn);
  EXPECT_EQ(action_of(first), Action::rerun);
  Finding other{.signature = "nonfinite_loss", .severity = Severity::fail};
  history.apply(other, {.reproducible = false});
  EXPECT_EQ(other.severity, Severity::warn) << "another signature's first transient";
  Finding second = wrong_gemm();
  history.apply(second, {.reproducible = false});
  EXPECT_EQ(second.severity, Severity::fail);
  EXPECT_EQ(second.classification, Classification::transient);
  EXPECT_EQ(action_of(second), Action::isolate_node);
  EXPECT_NE(second.message.find("transient again: 1 earlier in this run"), std::string::npos) << second.message;
}

TEST(AnomalyRerun, OnlyAPersistentAnomalyKeepsAFailSeverity) {
  Finding transient{.signature = "nonfinite_loss", .severity = Severity::fail, .message = "loss is nan"};
  apply_rerun(transient, {.reproducible = false});
  EXPECT_EQ(transient.severity, Severity::warn);
  EXPECT_EQ(action_of(transient), Action::rerun);
  EXPECT_EQ(transient.reproducible, false);
  EXPECT_FALSE(transient.also_in_fp32.has_value());
  EXPECT_NE(transient.message.find("re-run: transient"), std::string::npos) << transient.message;
  Finding persistent{.signature = "nonfinite_loss", .severity = Severity::fail};
  apply_rerun(persistent, {.reproducible = true, .also_in_fp32 = true});
  EXPECT_EQ(persistent.severity, Severity::fail);
  EXPECT_EQ(action_of(persistent), Action::isolate_node);
  Finding precision{.signature = "nonfinite_loss", .severity = Severity::fail};
  apply_rerun(precision, {.reproducible = true, .also_in_fp32 = false});
  EXPECT_EQ(precision.severity, Severity::warn);
  EXPECT_EQ(action_of(precision), Action::check_config);
}

TEST(RngChecks, ReplayBitwiseInDeterministicModeToleranceOtherwise) {
  const std::vector<double> original = {5.25, 4.875, 4.5, 4.125};
  EXPECT_FALSE(compare_replay(original, original, 41, true, 1e-4, 0));
  auto replayed = original;
  replayed[2] = std::nextafter(replayed[2], 10.0);  // one ulp
  const auto f = compare_replay(original, replayed, 41, /*deterministic=*/true, 1e-4, 0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->component, component::rocrand);
  EXPECT_EQ(f->signature, "replay_mismatch");
  EXPECT_EQ(f->step, 43);
  EXPECT_EQ(f->severity, Severity::fail);
  EXPECT_EQ(f->evidence["first_differing_step"], 43);

  EXPECT_FALSE(compare_replay(original, replayed, 41, /*deterministic=*/false, 1e-4, 0));
  replayed[1] *= 1.01;
  const auto g = compare_replay(original, replayed, 41, false, 1e-4, 0);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->step, 42);
  EXPECT_THROW(compare_replay(original, {1.0}, 1, true, 0, 0), std::invalid_argument);
}

// Whether deterministic algorithms were on at the start of each step the loop ran (the
// replay's unpublished steps and re-runs included), in the order they ran.
class DeterminismProbe final : public StepHooks {
 public:
  void on_step_begin(int64_t step) override { steps.emplace_back(step, at::globalContext().deterministicAlgorithms()); }
  std::vector<std::pair<int64_t, bool>> steps;
};

// determinism "replay" (what the rng mode asks for): deterministic algorithms only around the
// steps a replay check compares, the original run and its replay, which stay bitwise equal;
// ordinary steps run with them off. "all" keeps them on for every step.
RunContext replay_context(const std::string& name) {
  RunContext ctx;
  auto& c = ctx.cfg;
  c.hidden_size = 32, c.num_heads = 2, c.num_layers = 2, c.seq_len = 32, c.batch_size = 4;
  c.dropout = 0.1, c.drop_path = 0.1, c.eval_interval = 0, c.device = DeviceChoice::cpu;
  c.steps = 10, c.replay_check_interval = 4, c.replay_steps = 2;
  c = testing::on_the_cpu(c);
  ctx.output_dir = std::filesystem::temp_directory_path() / fmt::format("rcl-{}-{}", name, ::getpid());
  return ctx;
}

TEST(RngChecks, ReplayDeterminismIsOnOnlyAroundTheComparedSteps) {
  for (const std::string level : {"replay", "all"}) {
    RunContext ctx = replay_context("determinism-" + level);
    ctx.cfg.determinism = *parse_name<Determinism>(level);
    set_deterministic(false);
    FindingLog log(find_signature);
    Trainer trainer(ctx);
    ReplayCheck replay(ctx.diag, log, trainer, nullptr);
    DeterminismProbe probe;
    trainer.add_hooks(&probe);
    trainer.add_hooks(&replay);
    trainer.run();
    replay.finish();
    EXPECT_EQ(log.size(), 0u) << "the replays reproduced bitwise";
    std::map<int64_t, std::vector<bool>> runs;  // step -> on, per run of it
    for (const auto& [step, on] : probe.steps) runs[step].push_back(on);
    // Replays after steps 4 and 8: steps 5, 6, 9 and 10 run twice, every run deterministic.
    for (int64_t step : {5, 6, 9, 10})
      EXPECT_EQ(runs[step], (std::vector<bool>{true, true})) << level << " step " << step;
    const bool ordinary = level == "all";
    for (int64_t step : {1, 2, 3, 4, 8})
      EXPECT_EQ(runs[step], std::vector<bool>{ordinary}) << level << " step " << step;
    // The window closes once the replay is judged: off again after the run under "replay".
    EXPECT_EQ(at::globalContext().deterministicAlgorithms(), ordinary) << level;
    set_deterministic(false);
    std::filesystem::remove_all(ctx.output_dir);
  }
}

// The saved state in host memory (the default) or through the checkpoint files: clean replays
// reproduce bitwise either way, and a generator the reload leaves stale (rng-skew-once) is caught
// from either, transient (its re-run reloads cleanly), with nothing left in the output directory.
TEST(RngChecks, ReplayFromHostMemoryOrDiskCatchesAStaleGeneratorAndPassesClean) {
  for (const auto where : {ReplaySnapshot::host, ReplaySnapshot::disk}) {
    for (const bool skew : {false, true}) {
      RunContext ctx = replay_context(fmt::format("replay-{}-{}", name_of(where), skew));
      ctx.cfg.determinism = Determinism::all;
      ctx.cfg.replay_snapshot = where;
      std::filesystem::create_directories(ctx.output_dir);
      set_deterministic(false);
      const FaultPlan faults = FaultPlan::parse(skew ? "rng-skew-once@step=4" : "");
      FindingLog log(find_signature);
      {
        Trainer trainer(ctx);
        ReplayCheck replay(ctx.diag, log, trainer, &faults);
        trainer.add_hooks(&replay);
        trainer.run();
        replay.finish();
      }
      const auto findings = log.snapshot();
      if (!skew) {
        EXPECT_TRUE(findings.empty()) << name_of(where) << ": " << findings.front().message;
      } else {
        ASSERT_EQ(findings.size(), 1u) << name_of(where);
        EXPECT_EQ(findings[0].signature, "replay_mismatch");
        EXPECT_EQ(findings[0].classification, Classification::transient) << findings[0].message;
      }
      EXPECT_TRUE(std::filesystem::is_empty(ctx.output_dir)) << "the scratch state is removed";
      set_deterministic(false);
      std::filesystem::remove_all(ctx.output_dir);
    }
  }
}

TEST(RngChecks, MaskHashesAcrossRanks) {
  EXPECT_FALSE(check_mask_hashes_across_ranks({7, 7, 7, 7}, 10));
  const auto f = check_mask_hashes_across_ranks({7, 7, 9, 7}, 10);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->component, component::rocrand);
  EXPECT_EQ(f->signature, "dropout_mask_rank_mismatch");
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->evidence["differing_ranks"], nlohmann::json({2}));
}

TEST(RngChecks, SharedSeedMasksAgreeUnlessARankIsSkewed) {
  // Two ranks simulated in one process: same shared seed, same step.
  std::vector<uint64_t> hashes = {shared_seed_mask_hash(kCpu, 1234, 10, 0), shared_seed_mask_hash(kCpu, 1234, 10, 1)};
  EXPECT_FALSE(check_mask_hashes_across_ranks(hashes, 10));
  EXPECT_NE(shared_seed_mask_hash(kCpu, 1234, 11, 0), hashes[0]) << "the step changes the mask";
  hashes[1] = shared_seed_mask_hash(kCpu, 1234, 10, 1, /*skew=*/true);  // rng-skew@rank=1
  const auto f = check_mask_hashes_across_ranks(hashes, 10);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->evidence["differing_ranks"], nlohmann::json({1}));
}

TEST(RngChecks, SharedSeedMaskCheckCarriesFullHashesThroughTheGather) {
  // The gather of a two-rank group, with rank 1's hash drawn in this process too. The halves
  // must carry all 64 bits: a hash squeezed into one double would lose the low 11.
  const auto group_of_two = [](bool skew_rank1) -> GatherValues {
    return [skew_rank1](const std::vector<double>& mine) {
      const uint64_t other = shared_seed_mask_hash(kCpu, 1234, 10, 1, skew_rank1);
      return std::vector<std::vector<double>>{mine, {double(other >> 32), double(other & 0xffffffffULL)}};
    };
  };
  EXPECT_FALSE(check_shared_seed_masks(kCpu, 1234, 10, 0, false, group_of_two(false)));
  const auto f = check_shared_seed_masks(kCpu, 1234, 10, 0, false, group_of_two(true));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->signature, "dropout_mask_rank_mismatch");
  EXPECT_EQ(f->evidence["differing_ranks"], nlohmann::json({1}));
  EXPECT_EQ(f->evidence["hash_per_rank"][1],
            fmt::format("{:016x}", shared_seed_mask_hash(kCpu, 1234, 10, 1, /*skew=*/true)));
}

TEST(RngChecks, RestoreCheckIsSilentLeavesTheStreamAloneAndCatchesSkew) {
  seed_everything(99, kCpu);
  const auto expected = torch::rand({16});
  seed_everything(99, kCpu);
  EXPECT_FALSE(check_rng_restore(kCpu, 5, 0));
  shared_seed_mask_hash(kCpu, 1, 1, 0);  // reseeds internally, then restores
  EXPECT_TRUE(torch::equal(torch::rand({16}), expected)) << "the checks must not consume training randomness";

  const auto f = check_rng_restore(kCpu, 6, 0, /*skew=*/true);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->signature, "dropout_mask_not_reproducible");
  EXPECT_EQ(f->component, component::rocrand);
  EXPECT_EQ(f->step, 6);
  EXPECT_FALSE(compare_mask_generations(1, 1, "grad_accumulation", 3, 0));
  EXPECT_EQ(compare_mask_generations(1, 2, "activation_checkpoint", 3, 0)->evidence["context"],
            "activation_checkpoint");
}

TEST(RngChecks, TensorHashSeesEveryBit) {
  auto t = torch::arange(1000, torch::kFloat);
  const uint64_t h = tensor_hash(t);
  EXPECT_EQ(h, tensor_hash(t.clone()));
  t[999] = std::nextafter(999.0f, 2000.0f);
  EXPECT_NE(h, tensor_hash(t));
}

struct ClassifierCase {
  const char* source;
  const char* message;
  const char* component;
  const char* signature;
};

// Texts as PyTorch, HIP, ROCr, RCCL/NCCL and Gloo print them (sources: the public reports named).
const ClassifierCase kCases[] = {
    {"legacy-rocm-build#5742",
     "HIP error: an illegal memory access was encountered\nSearch for `hipErrorIllegalAddress' in "
     "https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more information.\nHIP kernel errors might be "
     "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging "
     "consider passing AMD_SERIALIZE_KERNEL=3\nCompile with `TORCH_USE_HIP_DSA` to enable device-side assertions.",
     component::hip_runtime, "illegal_memory_access"},
    {"legacy-rocm-build#6003 (CUDA-named on ROCm)",
     "CUDA error: an illegal memory access was encountered\nSearch for `hipErrorIllegalAddress' in "
     "https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more information.",
     component::hip_runtime, "illegal_memory_access"},
    {"ROCm/pytorch#797",
     "Memory access fault by GPU node-2 (Agent handle: 0x56468ab3bb50) on address 0x7fe55fb03000. Reason: Page not "
     "present or supervisor privilege.",
     component::hip_runtime, "illegal_memory_access"},
    {"legacy-rocm-build#4021", "HW Exception by GPU node-1 (Agent handle: 0x55d5c0a9f0a0) reason :GPU Hang",
     component::hip_runtime, "gpu_hang"},
    {"HIP runtime", "HIP error: unspecified launch failure\nSearch for `hipErrorLaunchFailure'", component::hip_runtime,
     "kernel_launch_failure"},
    {"HIP runtime", "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
     component::hip_runtime, "kernel_launch_failure"},
    {"Fooocus#2378", "RuntimeError: No HIP GPUs are available", component::hip_runtime, "no_device"},
    {"vllm#12572", "RuntimeError: HIP error: invalid device ordinal", component::hip_runtime, "no_device"},
    {"ComfyUI#9529",
     "HIP out of memory. Tried to allocate 432.00 MiB. GPU 0 has a total capacity of 15.92 GiB of which 7.12 GiB is "
     "free. Of the allocated memory 8.08 GiB is allocated by PyTorch, and 321.96 MiB is reserved by PyTorch but "
     "unallocated. If reserved but unallocated memory is large try setting "
     "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
     component::allocator, "out_of_memory"},
    {"libtorch CPU allocator",
     "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate "
     "1099511627776 bytes. Error code 12 (Cannot allocate memory)",
     component::allocator, "out_of_memory"},
    {"LlamaFactory#7396",
     "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
     "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
     component::rccl, "collective_timeout"},
    {"vllm#45092 (Gloo)", "Timed out waiting 1800000ms for recv operation to complete", component::rccl,
     "collective_timeout"},
    {"pytorch#75512 (Gloo)",
     "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [18.25.6.30]:28048",
     component::rccl, "collective_error"},
    {"MIOpen#1878", "MIOpen Error: database disk image is malformed", component::miopen, "miopen_error"},
    {"hipBLAS", "CUDA error: HIPBLAS_STATUS_EXECUTION_FAILED when calling `hipblasGemmEx(handle, opa, opb, ...)`",
     component::rocblas, "blas_error"},
    {"unknown", "std::runtime_error: the data file vanished", component::hip_runtime, "unclassified_crash"},
};

TEST(ErrorClassifier, RealMessagesMapToComponents) {
  for (const auto& c : kCases) {
    const auto cls = classify_error(c.message);
    EXPECT_EQ(cls.component, c.component) << c.source;
    EXPECT_EQ(cls.signature, c.signature) << c.source;
  }
}

// libtorch's out-of-memory text (the caching allocator's, as a ROCm build words it) with a case's sizes.
std::string oom_text(const std::string& requested, const std::string& capacity, const std::string& allocated,
                     const std::string& unallocated) {
  return "HIP out of memory. Tried to allocate " + requested + ". GPU 0 has a total capacity of " + capacity +
         " of which 0 bytes is free. Of the allocated memory " + allocated + " is allocated by PyTorch, and " +
         unallocated + " is reserved by PyTorch but unallocated.";
}

TEST(ErrorClassifier, OomFindingCarriesSizesAndTheLastMemorySample) {
  const MemorySample last{.allocated_bytes = 8 << 20, .reserved_bytes = 16 << 20, .source = "hip"};
  const auto f = crash_finding(kCases[8].message, 31, 1, "forward", last, /*cpu_run=*/false);
  EXPECT_EQ(f.component, component::allocator);
  EXPECT_EQ(f.severity, Severity::fail);
  EXPECT_EQ(f.step, 31);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.evidence["phase"], "forward");
  EXPECT_EQ(f.evidence["last_memory"]["reserved_bytes"], 16 << 20);
  const auto& a = f.evidence["allocator_message"];
  EXPECT_DOUBLE_EQ(a["requested_bytes"].get<double>(), 432.0 * 1024 * 1024);
  EXPECT_NEAR(a["reserved_unallocated_bytes"].get<double>(), 321.96 * 1024 * 1024, 1.0);
  EXPECT_EQ(a["fragmentation_suspected"], false);
  EXPECT_EQ(a["own_tensors_fill_device"], false);  // 8.08 of 15.92 GiB: room the allocator did not find
  EXPECT_FALSE(f.classification.has_value());
  EXPECT_EQ(f.message.find('\n'), std::string::npos) << "one line";

  // pytorch#175431's shape: a small request failing while GiBs sit reserved but unallocated.
  const auto frag = crash_finding(oom_text("2.00 MiB", "63.98 GiB", "47.12 GiB", "15.00 GiB"), 12, 0, "backward",
                                  std::nullopt, /*cpu_run=*/false);
  EXPECT_EQ(frag.evidence["allocator_message"]["fragmentation_suspected"], true);
  EXPECT_EQ(frag.evidence["allocator_message"]["own_tensors_fill_device"], false);
  EXPECT_FALSE(frag.classification.has_value());
  EXPECT_FALSE(frag.evidence.contains("last_memory"));

  // The run's own tensors fill the device (the H100's `--stress gemm,memory,fusion` on `small`):
  // a configuration that does not fit, not an allocator fault; the same request with most of the
  // device held elsewhere (another process) stays unclassified.
  const std::string full_device =
      "CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 5.65 GiB "
      "is free. Including non-PyTorch memory, this process has 73.52 GiB memory in use. Of the allocated memory "
      "72.81 GiB is allocated by PyTorch, and 52.82 MiB is reserved by PyTorch but unallocated.";
  const auto too_big = crash_finding(full_device, 1, 0, "forward", std::nullopt, /*cpu_run=*/false);
  EXPECT_EQ(too_big.classification, Classification::configuration);
  EXPECT_EQ(action_of(too_big), Action::check_config);
  EXPECT_NE(too_big.message.find("configuration does not fit"), std::string::npos) << too_big.message;
  EXPECT_NEAR(too_big.evidence["allocator_message"]["capacity_bytes"].get<double>(), 79.18 * (1 << 30), 1.0);
  // The H200's: 111.78 GiB held and 24 GiB asked for, 135.8 of 139.8 GiB: the request is the run's too.
  const auto too_big_with_request = crash_finding(oom_text("24.00 GiB", "139.80 GiB", "111.78 GiB", "8.47 GiB"), 1, 0,
                                                  "backward", std::nullopt, /*cpu_run=*/false);
  EXPECT_EQ(too_big_with_request.classification, Classification::configuration);
  EXPECT_EQ(too_big_with_request.evidence["allocator_message"]["fragmentation_suspected"], false);
  const auto crowded = crash_finding(oom_text("6.00 GiB", "79.18 GiB", "20.00 GiB", "52.82 MiB"), 1, 0, "forward",
                                     std::nullopt, /*cpu_run=*/false);
  EXPECT_EQ(crowded.evidence["allocator_message"]["own_tensors_fill_device"], false);
  EXPECT_FALSE(crowded.classification.has_value());

  const auto cpu = crash_finding(kCases[9].message, 2, 0, "forward", std::nullopt, /*cpu_run=*/false);
  EXPECT_DOUBLE_EQ(cpu.evidence["allocator_message"]["requested_bytes"].get<double>(), 1099511627776.0);
}

// On a CPU run every out-of-memory text, the CPU allocator's or any other, is the host's: no ROCm
// component allocated. Other crashes keep their classification.
TEST(ErrorClassifier, CpuOutOfMemoryIsTheHostsNotTheAllocators) {
  for (const char* message : {kCases[9].message, kCases[8].message, "std::bad_alloc"}) {
    const auto f = crash_finding(message, 1, 0, "setup_model", std::nullopt, /*cpu_run=*/true);
    EXPECT_EQ(f.component, component::host) << message;
    EXPECT_EQ(f.signature, "host_out_of_memory") << message;
    EXPECT_EQ(f.severity, Severity::fail);
    EXPECT_EQ(f.classification, Classification::configuration);
    EXPECT_EQ(action_of(f), Action::check_config);
    EXPECT_NE(f.message.find("the host's memory ran out"), std::string::npos) << f.message;
    EXPECT_EQ(f.message.find('\n'), std::string::npos) << "one line";
  }
  const auto requested = crash_finding(kCases[9].message, 1, 0, "setup_model", std::nullopt, /*cpu_run=*/true);
  EXPECT_DOUBLE_EQ(requested.evidence["allocator_message"]["requested_bytes"].get<double>(), 1099511627776.0);
  // The same text on a GPU run stays the allocator's; a CPU run's other crashes are unchanged.
  EXPECT_EQ(crash_finding(kCases[9].message, 1, 0, "forward", std::nullopt, false).component, component::allocator);
  const auto gloo = crash_finding(kCases[12].message, 1, 0, "grad_sync", std::nullopt, /*cpu_run=*/true);
  EXPECT_EQ(gloo.signature, "collective_error");
  EXPECT_EQ(gloo.component, component::rccl);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
