// Every detector proven through the real binary: a fault injected with --inject is found by the
// detector meant for it, attributed to the right ROCm component at the right step with the right
// severity, and the exit code and junit.xml say so. A clean `--stress all` run finds nothing
// (the false-positive check). One intra-op thread, and the executable runs serially under
// ctest (tests/CMakeLists.txt): timing detectors must not see the other tests' load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using rcl::testing::read_text;
using rcl::testing::run_cli;

constexpr const char* kRocblas = "rocBLAS/hipBLASLt";
constexpr const char* kRocrand = "rocRAND";
constexpr const char* kAllocator = "ROCr allocator";
constexpr const char* kHipRuntime = "HIP runtime";
constexpr const char* kAttention = "AOTriton/CK attention";

struct RunOutput {
  int exit_code = -1;
  std::string log;
  nlohmann::json report;
  std::string junit;
  std::vector<nlohmann::json> metrics;
  std::vector<std::string> files;  // what the output directory held at the end
};

// The smoke preset on one CPU thread, validation off (eval steps are irrelevant here).
RunOutput run_smoke(const std::string& name, const std::string& args, const std::string& env = "") {
  const fs::path dir = fs::temp_directory_path() / ("rcl-faults-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  const auto cli = run_cli(
      "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 --output-dir " + dir.string() + " " + args,
      env);
  RunOutput out{cli.exit_code, cli.out + cli.err, {}, {}, {}, {}};
  if (fs::exists(dir / "report.json")) out.report = nlohmann::json::parse(read_text(dir / "report.json"));
  out.junit = read_text(dir / "junit.xml");
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (!line.empty()) out.metrics.push_back(nlohmann::json::parse(line));
  if (fs::is_directory(dir))
    for (const auto& entry : fs::directory_iterator(dir)) out.files.push_back(entry.path().filename().string());
  fs::remove_all(dir);
  return out;
}

std::vector<nlohmann::json> findings_with(const nlohmann::json& report, const std::string& signature) {
  std::vector<nlohmann::json> out;
  for (const auto& f : report.value("findings", nlohmann::json::array()))
    if (f.at("signature") == signature) out.push_back(f);
  return out;
}

// The component's <testcase> in junit.xml holds a <failure>.
bool junit_failed(const std::string& junit, const std::string& component) {
  const auto start = junit.find("name=\"" + component + "\"");
  if (start == std::string::npos) return false;
  const auto end = junit.find("<testcase", start + 1);
  return junit.substr(start, end == std::string::npos ? std::string::npos : end - start).find("<failure") !=
         std::string::npos;
}

struct Expected {
  std::string signature;
  std::string component;
  int64_t step;
  std::string severity;
  std::string evidence_key = {};  // optional evidence that must hold `evidence_value`
  std::string evidence_value = {};
  std::string classification = {};  // optional: the anomaly re-run's verdict (anomaly_rerun.hpp)
  std::string action = {};          // optional
};

struct FaultCase {
  std::string name;
  std::string args;
  std::vector<Expected> expected;
  int exit_code;
  std::string verdict;
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

class FaultInjection : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultInjection, DetectedAttributedAndReported) {
  const FaultCase& c = GetParam();
  const RunOutput run = run_smoke(c.name, c.args);
  ASSERT_TRUE(run.report.is_object()) << "no report.json; log:\n" << run.log;
  EXPECT_EQ(run.exit_code, c.exit_code) << run.log;
  EXPECT_EQ(run.report.at("exit_code"), c.exit_code);
  EXPECT_EQ(run.report.at("verdict"), c.verdict);
  EXPECT_FALSE(run.report.at("faults").empty()) << "the report names the injected faults";

  for (const auto& e : c.expected) {
    const auto found = findings_with(run.report, e.signature);
    ASSERT_FALSE(found.empty()) << e.signature << " not reported; findings:\n"
                                << run.report.at("findings").dump(1) << "\nlog:\n"
                                << run.log;
    const auto& f = found.front();
    EXPECT_EQ(f.at("component"), e.component) << f.dump();
    EXPECT_EQ(f.at("step"), e.step) << f.dump();
    EXPECT_EQ(f.at("severity"), e.severity) << f.dump();
    if (!e.evidence_key.empty()) EXPECT_EQ(f.at("evidence").at(e.evidence_key), e.evidence_value) << f.dump();
    if (!e.classification.empty()) EXPECT_EQ(f.at("classification"), e.classification) << f.dump();
    if (!e.action.empty()) EXPECT_EQ(f.at("action"), e.action) << f.dump();
    // junit.xml: a component fails exactly when it has a fail finding; every finding says what to do.
    EXPECT_NE(run.junit.find("action " + f.at("action").get<std::string>()), std::string::npos) << run.junit;
    bool component_fails = false;
    for (const auto& any : run.report.at("findings"))
      component_fails |= any.at("component") == e.component && any.at("severity") == "fail";
    EXPECT_EQ(junit_failed(run.junit, e.component), component_fails) << e.component << "\n" << run.junit;
  }
}

// Steps are the fewest each detector needs: timing baselines start after diagnostics.warmup_steps
// (5) and span window_steps (10); memory growth needs two windows.
INSTANTIATE_TEST_SUITE_P(
    EveryFault, FaultInjection,
    ::testing::Values(
        // NaN out of block 0 at step 12: the loss detector fails the step, and the re-run of the
        // micro-batch names block 0 as the first non-finite output, also in fp32.
        FaultCase{"nan",
                  "--steps 13 --inject nan@step=12",
                  {{"nonfinite_loss", kRocblas, 12, "fail", "", "", "persistent", "isolate_node"},
                   {"nonfinite_also_fp32", kRocblas, 12, "fail", "first_nonfinite_training", "block0"}},
                  1,
                  "FAIL"},
        // Logits x20 for one step: the loss jumps and recovers (no divergence); the gradient norm
        // jumps with it.
        FaultCase{"loss_spike",
                  "--steps 32 --inject loss-spike@step=25",
                  {{"loss_spike", kRocblas, 25, "warn", "", "", "persistent", "isolate_node"},
                   {"grad_norm_spike", kRocblas, 25, "warn", "", "", "persistent"}},
                  0,
                  "WARN"},
        // One NaN in the LM head's output, the first time step 12 runs: the step re-run from the
        // state before it is finite, so the anomaly is transient (warn, rerun), and so says the
        // localiser's own re-run of the forward.
        FaultCase{"logits_nan_once",
                  "--steps 13 --inject logits-nan-once@step=12",
                  {{"nonfinite_loss", kRocblas, 12, "warn", "", "", "transient", "rerun"},
                   {"nonfinite_grad_norm", kRocblas, 12, "warn", "", "", "transient", "rerun"},
                   {"nonfinite_not_reproducible", kRocblas, 12, "warn", "", "", "transient", "rerun"}},
                  0,
                  "WARN"},
        // The same NaN in every forward from step 12 on, re-runs included: persistent, also in
        // float32 (a CPU run: the CPU comparison is not made), fail, isolate the node.
        FaultCase{"logits_nan",
                  "--steps 13 --inject logits-nan@step=12",
                  {{"nonfinite_loss", kRocblas, 12, "fail", "", "", "persistent", "isolate_node"},
                   {"nonfinite_also_fp32", kRocblas, 12, "fail", "", "", "persistent", "isolate_node"}},
                  1,
                  "FAIL"},
        // A flipped top exponent bit (x 2^128) overflows the float32 norm: Inf, update applied.
        FaultCase{"grad_bitflip",
                  "--steps 21 --inject grad-bitflip@step=20",
                  {{"nonfinite_grad_norm", kRocblas, 20, "fail"}},
                  1,
                  "FAIL"},
        // 2 s more per step from step 16 (a CPU cliff is 4x: still 5x a smoke step that a loaded
        // 2-core host stretched to 0.5 s); a cliff needs 5 slow steps in a row.
        FaultCase{"slow_step",
                  "--steps 20 --inject slow-step@step=16=2",
                  {{"step_time_cliff", kRocblas, 16, "warn"}},
                  0,
                  "WARN"},
        // Two windows of 10 post-warm-up steps (6..25) growing 8 MiB each.
        FaultCase{"memory_leak",
                  "--steps 25 --inject memory-leak=8MiB/step",
                  {{"memory_growth", kAllocator, 25, "warn"}},
                  0,
                  "WARN"},
        FaultCase{"hang",
                  "--steps 20 --watchdog-timeout 2 --inject hang@step=8",
                  {{"hang", kHipRuntime, 8, "fail", "phase", "forward"}},
                  3,
                  "HUNG"},
        // rng mode, a replay check at step 10 whose reload restores a skewed generator, every time:
        // the mismatch's re-run meets it again (persistent).
        FaultCase{"rng_skew",
                  "--stress rng --set replay_check_interval=10 --steps 12 --inject rng-skew@step=10",
                  {{"dropout_mask_not_reproducible", kRocrand, 10, "fail"},
                   {"replay_mismatch", kRocrand, 11, "fail", "", "", "persistent", "isolate_node"}},
                  1,
                  "FAIL"},
        // The same once: the re-run's reload is clean and agrees with the first run (transient).
        FaultCase{"rng_skew_once",
                  "--stress rng --set replay_check_interval=10 --steps 12 --inject rng-skew-once@step=10",
                  {{"replay_mismatch", kRocrand, 11, "warn", "", "", "transient", "rerun"}},
                  0,
                  "WARN"},
        FaultCase{"gemm_corrupt",
                  "--steps 5 --set diagnostics.gemm_canary_interval=5 --inject gemm-corrupt",
                  {{"gemm_wrong_result", kRocblas, 5, "fail", "", "", "persistent", "isolate_node"}},
                  1,
                  "FAIL"},
        // The canary's re-run of the shape is right: transient, a warn, re-run the job.
        FaultCase{"gemm_corrupt_once",
                  "--steps 5 --set diagnostics.gemm_canary_interval=5 --inject gemm-corrupt-once@step=5",
                  {{"gemm_wrong_result", kRocblas, 5, "warn", "", "", "transient", "rerun"}},
                  0,
                  "WARN"},
        // Block 0's Q/K/V projection stores one wrong element at step 3: its checksums name the GEMM
        // in that step; its next call (step 4) is right, so a transient.
        FaultCase{"gemm_output_corrupt",
                  "--steps 5 --set diagnostics.gemm_checksums=all --inject gemm-output-corrupt@step=3",
                  {{"gemm_checksum_mismatch", kRocblas, 3, "warn", "gemm", "block0.attn.qkv forward", "transient",
                    "rerun"}},
                  0,
                  "WARN"},
        // One backend's masked outputs come out wrong at the probe of step 4 (the start-up probe,
        // step 0, is before the fault): the explicit math path on 1.13, a fused one on 2.x.
        FaultCase{"attention_mask_corrupt",
                  "--steps 4 --set attention_probe_interval=4 --set attention_probe_seq_len=96 "
                  "--inject attention-mask-corrupt",
                  {{"attention_backend_mismatch", kAttention, 4, "fail"}},
                  1,
                  "FAIL"},
        // Memory leaked between the replay check's save (step 10) and its reload.
        FaultCase{"reload_leak",
                  "--stress rng --set replay_check_interval=10 --steps 12 --inject memory-leak=48MiB/step@step=11",
                  {{"memory_not_recovered_after_reload", kAllocator, 10, "warn"}},
                  0,
                  "WARN"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return info.param.name; });

std::vector<double> losses(const RunOutput& run) {
  std::vector<double> out;
  for (const auto& m : run.metrics) out.push_back(m.at("loss").get<double>());
  return out;
}

// The false-positive check: every stress mode, every detector and active check on, and not one
// warning. 30 steps reach every detector: the step-time reference (steps 6..15), two memory
// windows (6..25), a replay at 20 (steps 21..22), the GEMM canary at 25, fingerprints every 10
// (both intervals shortened from their defaults so that 30 steps reach them).
TEST(FaultInjectionBaseline, CleanStressAllRunHasNoWarnOrFailFinding) {
  const RunOutput run =
      run_smoke("clean",
                "--stress all --set replay_check_interval=20 --set diagnostics.gemm_canary_interval=25 "
                "--set diagnostics.fingerprint_interval=10 --steps 30");
  ASSERT_TRUE(run.report.is_object()) << run.log;
  EXPECT_EQ(run.exit_code, 0) << run.log;
  EXPECT_EQ(run.report.at("verdict"), "PASS");
  for (const auto& f : run.report.at("findings")) EXPECT_EQ(f.at("severity"), "info") << f.dump(1);
  // A CPU run: no finding, and no component exercised, each with its reason.
  for (const auto& component : run.report.at("components")) {
    EXPECT_EQ(component.at("status"), "NOT_RUN") << component;
    EXPECT_FALSE(component.at("reason").get<std::string>().empty()) << component;
  }
  EXPECT_EQ(run.report.at("exercised_rocm_components"), nlohmann::json::array());
  EXPECT_NE(run.junit.find("skipped=\"7\""), std::string::npos) << run.junit;
  EXPECT_NE(run.junit.find("<skipped message=\"CPU device: no ROCm library ran\"/>"), std::string::npos) << run.junit;
  EXPECT_NE(run.junit.find("classname=\"rocm-conformance-llm.check\" name=\"replay\""), std::string::npos) << run.junit;
  EXPECT_NE(run.log.find("No ROCm component was exercised"), std::string::npos) << run.log;

  // The checks really ran: the replay reproduced bitwise, and every 10th step has a fingerprint.
  EXPECT_NE(run.log.find("replay check: steps 21..22 reproduced bitwise"), std::string::npos) << run.log;
  ASSERT_EQ(run.metrics.size(), 30u);
  for (const auto& m : run.metrics)
    EXPECT_EQ(m.contains("op_counts"), m.at("step").get<int64_t>() % 10 == 0) << m.at("step");
  const auto& ops = run.metrics[9].at("op_counts");
  EXPECT_GT(ops.value("aten::mm", 0) + ops.value("aten::addmm", 0) + ops.value("aten::bmm", 0), 0) << ops.dump();
}

// A replay check rewinds (its saved state copied back from host memory, or a private checkpoint
// reloaded with the checkpoint loader) and re-runs steps, then training continues from the re-run:
// the logged trajectory is bitwise the one a run without the check logs, so the reload restored
// every bit a step reads.
TEST(FaultInjectionBaseline, ReplayChecksLeaveTheLossTrajectoryUnchanged) {
  const RunOutput unchecked = run_smoke("replay-off", "--stress rng --steps 20");  // rng's own interval: 50
  ASSERT_EQ(unchecked.exit_code, 0) << unchecked.log;
  EXPECT_EQ(unchecked.log.find("replay check"), std::string::npos);
  // The saved state in host memory (the default), and through the checkpoint writer and loader.
  for (const std::string where : {"host", "disk"}) {
    const RunOutput checked = run_smoke("replay-on-" + where, "--stress rng --set replay_check_interval=8 --steps 20 "
                                                              "--set replay_snapshot=" + where);
    ASSERT_EQ(checked.exit_code, 0) << checked.log;
    EXPECT_NE(checked.log.find("replay check: steps 9..10 reproduced bitwise"), std::string::npos) << where;
    EXPECT_NE(checked.log.find("replay check: steps 17..18 reproduced bitwise"), std::string::npos) << where;
    if (where == "host") {
      EXPECT_NE(checked.log.find("replay check: state at step 16 copied to host memory and back"), std::string::npos)
          << checked.log;
    } else {
      EXPECT_NE(checked.log.find("replay check: state at step 16 saved to"), std::string::npos) << checked.log;
      EXPECT_NE(checked.log.find("and reloaded by the checkpoint loader"), std::string::npos);
    }
    // Either way no files are left behind.
    for (const auto& file : checked.files) EXPECT_EQ(file.find(".replay-checkpoint"), std::string::npos) << file;
    EXPECT_EQ(losses(checked), losses(unchecked)) << where;
  }
}

// The anomaly re-run rewinds two steps, runs the spiked step again and puts the run back: the
// logged trajectory is bitwise the one of the same faulty run without any check.
TEST(AnomalyRerun, ReRunLeavesTheLossTrajectoryUnchanged) {
  const RunOutput checked = run_smoke("rerun-on", "--steps 32 --inject loss-spike@step=25");
  const RunOutput unchecked =
      run_smoke("rerun-off", "--steps 32 --inject loss-spike@step=25 --set diagnostics.enabled=false");
  ASSERT_EQ(checked.exit_code, 0) << checked.log;
  ASSERT_EQ(unchecked.exit_code, 0) << unchecked.log;
  const auto spikes = findings_with(checked.report, "loss_spike");
  ASSERT_EQ(spikes.size(), 1u) << checked.report.dump(1);
  EXPECT_EQ(spikes[0].at("reproducible"), true);
  EXPECT_EQ(losses(checked), losses(unchecked));
  EXPECT_EQ(losses(checked).size(), 32u);
}

// Clean runs on several seeds: no numeric anomaly, so nothing is re-run and no finding carries a
// classification. (Timing findings of a loaded machine are the step-time detector's to judge.)
TEST(AnomalyRerun, CleanRunsOnSeveralSeedsClassifyNothing) {
  for (const char* seed : {"1", "2", "3"}) {
    const RunOutput run = run_smoke(std::string("rerun-clean-") + seed, std::string("--steps 40 --seed ") + seed);
    ASSERT_TRUE(run.report.is_object()) << run.log;
    EXPECT_EQ(run.exit_code, 0) << run.log;
    for (const auto& f : run.report.at("findings")) {
      EXPECT_TRUE(f.at("classification").is_null()) << f.dump(1);
      const std::string signature = f.at("signature");
      for (const char* numeric : {"nonfinite_loss", "nonfinite_grad_norm", "loss_spike", "grad_norm_spike"})
        EXPECT_NE(signature, numeric) << "seed " << seed << ": " << f.dump(1);
    }
    EXPECT_EQ(run.log.find("[re-run:"), std::string::npos) << "no finding was amended by a re-run";
  }
}

// An ordinary step with diagnostics at their defaults issues no blocking device-to-host read:
// the loss's finiteness is decided on the device and read one step late (on a GPU
// each read drains the queue the device works from). Counted on CPU at the call sites a GPU would block on; validation
// steps do read, which shows the counter counts.
TEST(HostReads, OrdinaryStepsIssueNoneAndValidationStepsAreCounted) {
  const RunOutput run =
      run_smoke("host-reads", "--steps 12 --set eval_interval=5 --set diagnostics.count_host_reads=true");
  ASSERT_EQ(run.exit_code, 0) << run.log;
  ASSERT_EQ(run.metrics.size(), 12u);
  for (const auto& m : run.metrics) {
    const int64_t step = m.at("step");
    ASSERT_TRUE(m.contains("host_reads")) << m.dump();
    if (step % 5 == 0) EXPECT_GE(m.at("host_reads").get<int64_t>(), 1) << "validation at step " << step;
    else EXPECT_EQ(m.at("host_reads").get<int64_t>(), 0) << "ordinary step " << step;
  }
}

// A non-finite step withholds its update (and the next one's, queued before the host read it):
// the weights stay as they were, the fault is localised from them, and training goes on with
// finite losses. Before, one NaN step poisoned every weight for the rest of the run.
TEST(HostReads, NonFiniteStepIsWithheldLocalisedAndTrainingGoesOn) {
  const RunOutput run = run_smoke("withheld", "--steps 12 --inject nan@step=6");
  ASSERT_TRUE(run.report.is_object()) << run.log;
  EXPECT_EQ(run.exit_code, 1) << run.log;
  const auto localised = findings_with(run.report, "nonfinite_also_fp32");
  ASSERT_EQ(localised.size(), 1u) << run.report.dump(1);
  EXPECT_EQ(localised[0].at("step"), 6);
  ASSERT_EQ(run.metrics.size(), 12u);
  for (const auto& m : run.metrics) {  // metrics.jsonl writes a non-finite loss as null
    const bool finite = m.at("loss").is_number() && std::isfinite(m.at("loss").get<double>());
    EXPECT_EQ(finite, m.at("step") != 6) << m.dump();
  }
  EXPECT_NE(run.log.find("updates of steps 6..7 were withheld"), std::string::npos) << run.log;
}

// OpenBLAS's pthreads pool spinning beside libtorch's stalls CPU training (docs/performance.md).
// Where OpenBLAS's OpenMP build is installed the binary loads it (CMakeLists.txt: DT_RPATH), and
// its GEMMs run on libtorch's threads; the pthreads build runs one BLAS thread inside libtorch's
// pool, and an explicit OPENBLAS_NUM_THREADS wins.
TEST(ProcessSettings, CpuRunSharesLibtorchsThreadsWithOpenBlas) {
  const RunOutput own = run_smoke("blas-own", "--steps 2", "env -u OPENBLAS_NUM_THREADS");
  ASSERT_TRUE(own.report.is_object()) << own.log;
  const auto& environment = own.report.at("environment");
  if (environment.at("blas") != "openblas") GTEST_SKIP() << "BLAS is " << environment.at("blas");
  const bool openmp_installed = std::filesystem::exists("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
  const std::string threading = environment.at("blas_threading");
  EXPECT_EQ(threading, openmp_installed ? "openmp" : "pthreads") << environment.dump();
  const int intra_op = environment.at("intra_op_threads");
  EXPECT_EQ(environment.at("blas_threads"), threading == "openmp" ? intra_op : 1) << environment.dump();
  if (threading != "pthreads") return;  // the OpenMP build follows libtorch's thread count
  const RunOutput user = run_smoke("blas-user", "--steps 2", "OPENBLAS_NUM_THREADS=2");
  ASSERT_TRUE(user.report.is_object()) << user.log;
  EXPECT_EQ(user.report.at("environment").at("blas_threads"), 2);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
