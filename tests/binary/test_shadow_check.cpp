// The shadow check and the checksum check through the real binary, with a BLAS below libtorch that
// corrupts one GEMM shape (the LD_PRELOAD shim in tests/shim/). Shadow check: reported within 10
// steps, a single corrupted call caught when checked and classified not reproducible, an
// intermittent one failing at its second transient. Checksum check: one wrong element once, every
// call, a whole output 1% off, a backward GEMM only, each caught in its step and named; the
// rotating share within its rotation. Clean runs report nothing. In-process:
// tests/unit/test_shadow_verdict.cpp, tests/unit/test_gemm_checksums.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using rcl::testing::fresh_dir;
using rcl::testing::kSmokeCpu;
using rcl::testing::read_text;
using rcl::testing::run_cli;

struct ShimRun {
  int exit_code = -1;
  nlohmann::json findings;
  nlohmann::json checksums;  // report.json's gemm_checksums section
  std::string shim_log;
};

// The QKV projection's forward (below) and its weight gradient dW = dYᵀ X: [192 x 1024] x
// [1024 x 64], sgemm_'s m = 64, n = 192, k = 1024, once per layer in each step's backward.
const std::string kQkvForward = "RCL_SHIM_M=192 RCL_SHIM_N=1024 RCL_SHIM_K=64";
const std::string kQkvWeightGradient = "RCL_SHIM_M=64 RCL_SHIM_N=192 RCL_SHIM_K=1024";

// smoke on CPU, fp32 (bf16 GEMMs reach BLAS only where they run in float32: see docs/fault-injection.md),
// on the explicit attention path in every lane, so a layer has the same 8 checked ops (QK^T and PV
// among them) and the rotation's arithmetic below holds on libtorch 1.13 and 2.x alike.
// The QKV projection of the smoke model: y = x W^T with 1024 tokens, 64 in, 192 out, which
// libtorch passes to sgemm_ as m = 192, n = 1024, k = 64 (no other GEMM of the step has it).
ShimRun run_with_shim(const std::string& name, const std::string& shim_env, const std::string& args,
                      const std::string& shape = kQkvForward) {
  const auto dir = fresh_dir("shadow", name);
  const auto log = dir.string() + ".shim";
  const std::string env = "LD_PRELOAD=" RCL_BLAS_SHIM " " + shape + " RCL_SHIM_LOG=" + log + " " + shim_env;
  const auto r = run_cli(kSmokeCpu + "--set attention_backend=math " + args + " --output-dir " + dir.string(), env);
  ShimRun out{.exit_code = r.exit_code};
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  out.findings = report["findings"];
  out.checksums = report.value("gemm_checksums", nlohmann::json());
  out.shim_log = read_text(log);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(log);
  return out;
}

std::vector<nlohmann::json> findings_of(const nlohmann::json& findings, const std::string& signature) {
  std::vector<nlohmann::json> out;
  for (const auto& f : findings)
    if (f["signature"] == signature) out.push_back(f);
  return out;
}
std::vector<nlohmann::json> shadow_findings(const nlohmann::json& findings) {
  return findings_of(findings, "gemm_shadow_mismatch");
}
std::vector<nlohmann::json> checksum_findings(const nlohmann::json& findings) {
  return findings_of(findings, "gemm_checksum_mismatch");
}
const std::string kEveryGemm = " --set diagnostics.gemm_checksums=all";

// One call of the QKV shape before step 1 (the GEMM canary's own), then two per step
// (one per layer): call 2s is step s's first. Corrupted from step 5 on, every mode is caught within 10 steps, named,
// reproducible.
TEST(ShadowCheckRun, ShimCorruptionOfOneShapeIsCaughtWithinTenSteps) {
  constexpr int kInjectStep = 5;
  for (const std::string mode : {"nan", "large", "rel"}) {
    const auto run = run_with_shim(
        mode, "RCL_SHIM_MODE=" + mode + " RCL_SHIM_SCHEDULE=from RCL_SHIM_CALL=" + std::to_string(2 * kInjectStep),
        "--steps 16");
    ASSERT_NE(run.shim_log.find("call " + std::to_string(2 * kInjectStep)), std::string::npos) << run.shim_log;
    const auto found = shadow_findings(run.findings);
    ASSERT_FALSE(found.empty()) << mode << ": " << run.findings.dump(1);
    const auto& first = found.front();
    EXPECT_EQ(first["component"], "rocBLAS/hipBLASLt");
    EXPECT_EQ(first["severity"], "fail");
    EXPECT_GE(first["step"].get<int>(), kInjectStep) << mode;
    EXPECT_LE(first["step"].get<int>() - kInjectStep, 10) << mode;
    // The QKV projection: x [16, 64, 64] times the [192, 64] weight, plus its bias.
    EXPECT_NE(first["evidence"]["op"].get<std::string>().find("aten::linear [16, 64, 64] x [192, 64] x [192] Float"),
              std::string::npos)
        << first.dump();
    EXPECT_TRUE(first["reproducible"].get<bool>()) << mode;
    EXPECT_EQ(first["classification"], "persistent") << mode;
    EXPECT_EQ(run.exit_code, 1) << mode;
  }
}

// Corrupted once, at a call the rotation checks (the 8 ops of smoke in turn: step 10 checks QKV's
// second call, layer 1, call 21): caught, and
// the re-run is correct, so not reproducible: a transient fault, a warning whose action is to run
// the validation again (capped like every re-run anomaly), and the run passes.
TEST(ShadowCheckRun, OneCorruptedCallIsCaughtWhenCheckedAndIsNotReproducible) {
  const auto run = run_with_shim("once", "RCL_SHIM_MODE=rel RCL_SHIM_SCHEDULE=once RCL_SHIM_CALL=21", "--steps 12");
  const auto found = shadow_findings(run.findings);
  ASSERT_EQ(found.size(), 1u) << run.findings.dump(1);
  EXPECT_EQ(found[0]["step"], 10);
  EXPECT_EQ(found[0]["evidence"]["occurrence"], 1);  // layer 1
  EXPECT_FALSE(found[0]["reproducible"].get<bool>());
  EXPECT_EQ(found[0]["classification"], "transient");
  EXPECT_EQ(found[0]["action"], "rerun");
  EXPECT_EQ(found[0]["severity"], "warn");
  EXPECT_NE(found[0]["message"].get<std::string>().find("[re-run: transient"), std::string::npos) << found[0];
  EXPECT_EQ(run.exit_code, 0);
}

// Corrupted every 4th call of the shape from call 13: the checks of steps 10 and 18 meet a
// corrupted call (one call is checked per step, so an intermittent fault is met only now and
// then), each re-run (the next call, at the next step's start) is
// correct (transient), but the second transient of the run is an intermittent fault, not a
// one-off: it fails, action isolate_node, and so does the run.
TEST(ShadowCheckRun, IntermittentCorruptionFailsAtItsSecondTransient) {
  const auto run = run_with_shim(
      "intermittent", "RCL_SHIM_MODE=rel RCL_SHIM_SCHEDULE=every RCL_SHIM_CALL=13 RCL_SHIM_EVERY=4", "--steps 24");
  const auto found = shadow_findings(run.findings);
  ASSERT_GE(found.size(), 2u) << run.findings.dump(1);
  for (const auto& f : found) EXPECT_EQ(f["classification"], "transient") << f;
  EXPECT_EQ(found[0]["step"], 10);
  EXPECT_EQ(found[1]["step"], 18);
  EXPECT_EQ(found[0]["severity"], "warn");
  EXPECT_EQ(found[0]["action"], "rerun");
  EXPECT_EQ(found[1]["severity"], "fail");
  EXPECT_EQ(found[1]["action"], "isolate_node");
  EXPECT_EQ(run.exit_code, 1);
}

// Checksum check, every GEMM judged. Step s's forward calls the QKV shape at 2s (block 0) and
// 2s + 1 (block 1); one element set to 1e6 at call 10, step 5: caught in that step, at row 0 and
// column 0 (sgemm_'s C[0, 0] is token 0, output feature 0), named; the next call is right, so a
// transient (warn, re-run), and the run passes.
TEST(GemmChecksumRun, OneWrongElementOnceIsCaughtInItsStepAndNamed) {
  const auto run = run_with_shim("checksum-once", "RCL_SHIM_MODE=large RCL_SHIM_SCHEDULE=once RCL_SHIM_CALL=10",
                                 "--steps 8" + kEveryGemm);
  const auto found = checksum_findings(run.findings);
  ASSERT_EQ(found.size(), 1u) << run.findings.dump(1);
  const auto& f = found[0];
  EXPECT_EQ(f["step"], 5);
  EXPECT_EQ(f["evidence"]["gemm"], "block0.attn.qkv forward");
  EXPECT_EQ(f["evidence"]["shape_mkn"], nlohmann::json({1024, 64, 192}));
  EXPECT_EQ(f["evidence"]["row"], 0);
  EXPECT_EQ(f["evidence"]["column"], 0);
  EXPECT_EQ(f["component"], "rocBLAS/hipBLASLt");
  EXPECT_EQ(f["classification"], "transient");
  EXPECT_EQ(f["severity"], "warn");
  EXPECT_EQ(run.exit_code, 0);
}

// Every call from step 5 on: caught at step 5 in both layers, persistent, the run fails.
TEST(GemmChecksumRun, EveryCallWrongIsPersistentFromItsFirstStep) {
  const auto run = run_with_shim("checksum-every", "RCL_SHIM_MODE=large RCL_SHIM_SCHEDULE=from RCL_SHIM_CALL=10",
                                 "--steps 8" + kEveryGemm);
  const auto found = checksum_findings(run.findings);
  ASSERT_FALSE(found.empty()) << run.findings.dump(1);
  EXPECT_EQ(found[0]["step"], 5);
  EXPECT_EQ(found[0]["evidence"]["gemms_wrong"], 2);
  EXPECT_EQ(found[0]["classification"], "persistent");
  EXPECT_EQ(found[0]["severity"], "fail");
  EXPECT_EQ(run.exit_code, 1);
}

// A bf16 run whose GEMMs run in float32 (a CPU without a native bf16 kernel; forced here) reaches
// BLAS, so a BLAS that stores wrong values is caught in bf16 too; libtorch's own bf16 kernel never
// passes the shape to BLAS (the control).
TEST(GemmChecksumRun, Bf16GemmsComputedInFloat32AreCheckedBelowLibtorchToo) {
  const std::string shim = "RCL_SHIM_MODE=large RCL_SHIM_SCHEDULE=from RCL_SHIM_CALL=10 ";
  const auto emulated =
      run_with_shim("bf16-float32", shim + "RCL_REDUCED_GEMM=float32", "--precision bf16 --steps 8" + kEveryGemm);
  const auto found = checksum_findings(emulated.findings);
  ASSERT_FALSE(found.empty()) << emulated.findings.dump(1);
  EXPECT_NE(found[0]["message"].get<std::string>().find("BFloat16"), std::string::npos) << found[0].dump();
  EXPECT_EQ(found[0]["severity"], "fail");
  EXPECT_EQ(emulated.exit_code, 1);
  const auto native =
      run_with_shim("bf16-native", shim + "RCL_REDUCED_GEMM=native", "--precision bf16 --steps 8" + kEveryGemm);
  EXPECT_TRUE(checksum_findings(native.findings).empty()) << native.findings.dump(1);
  // Only the GEMM canary's float32 call of the shape: never the corrupted ones from call 10.
  EXPECT_LT(std::stol(native.shim_log.substr(native.shim_log.find("calls ") + 6)), 10) << native.shim_log;
}

// Every element of one call 1% off (fp32: far above its rounding): caught in its step.
TEST(GemmChecksumRun, AWholeOutputOnePercentOffIsCaughtInItsStep) {
  const auto run = run_with_shim("checksum-rel", "RCL_SHIM_MODE=rel RCL_SHIM_SCHEDULE=once RCL_SHIM_CALL=11",
                                 "--steps 8" + kEveryGemm);
  const auto found = checksum_findings(run.findings);
  ASSERT_EQ(found.size(), 1u) << run.findings.dump(1);
  EXPECT_EQ(found[0]["step"], 5);
  EXPECT_EQ(found[0]["evidence"]["gemm"], "block1.attn.qkv forward");
}

// Only a backward GEMM wrong (the QKV weight gradient, calls 2s - 1 and 2s at step s): caught at
// its step and named as the backward's dW; the forward's checks saw nothing.
TEST(GemmChecksumRun, ABackwardGemmOnlyIsCaughtAndNamed) {
  const auto run = run_with_shim("checksum-backward", "RCL_SHIM_MODE=large RCL_SHIM_SCHEDULE=once RCL_SHIM_CALL=9",
                                 "--steps 8" + kEveryGemm, kQkvWeightGradient);
  ASSERT_NE(run.shim_log.find("call 9"), std::string::npos) << run.shim_log;
  const auto found = checksum_findings(run.findings);
  ASSERT_EQ(found.size(), 1u) << run.findings.dump(1);
  EXPECT_EQ(found[0]["step"], 5);
  EXPECT_EQ(found[0]["evidence"]["site"], "attn.qkv");
  EXPECT_EQ(found[0]["evidence"]["pass"], "backward dW");
  EXPECT_EQ(found[0]["evidence"]["shape_mkn"], nlohmann::json({192, 1024, 64}));
}

// The default, a rotating share of 4 distinct GEMMs a step: smoke's 27 (9 linears, 3 GEMMs each)
// are all judged within 7 steps, 4 a step, and a persistent corruption is met within one rotation.
TEST(GemmChecksumRun, TheRotatingShareJudgesEveryGemmInTurn) {
  const auto clean = run_with_shim("checksum-rotating", "", "--steps 8");
  EXPECT_TRUE(checksum_findings(clean.findings).empty()) << clean.findings.dump(1);
  EXPECT_EQ(clean.checksums["mode"], "rotating");
  EXPECT_EQ(clean.checksums["distinct_gemms"], 27);
  // 4 picks a step; the LM head's forward, when picked, is judged again where its chunk is
  // recomputed in backward (workload/lm_head.hpp): at most one more call a step on smoke (one chunk).
  EXPECT_GE(clean.checksums["calls_judged"].get<int64_t>(), 8 * 4);
  EXPECT_LE(clean.checksums["calls_judged"].get<int64_t>(), 8 * 5);
  const auto run = run_with_shim("checksum-rotating-fault",
                                 "RCL_SHIM_MODE=large RCL_SHIM_SCHEDULE=from RCL_SHIM_CALL=10", "--steps 14");
  const auto found = checksum_findings(run.findings);
  ASSERT_FALSE(found.empty()) << run.findings.dump(1);
  EXPECT_GE(found[0]["step"].get<int>(), 5);
  EXPECT_LE(found[0]["step"].get<int>(), 5 + 7);
}

// The shim loaded but off, and no shim at all: fp32 and bf16, several seeds and modes, every GEMM
// judged by its checksums too. `all` (bf16: the gemm mode's) runs 12 steps of its larger model: on
// a CPU without native bf16 GEMMs a step of it costs about 300 smoke steps; fusion's norms and
// SwiGLU in fp32.
TEST(ShadowCheckRun, CleanRunsReportNothing) {
  for (const std::string args :
       {"--steps 40 --seed 1", "--steps 40 --seed 2 --precision bf16", "--steps 12 --seed 3 --stress all",
        "--steps 30 --seed 4 --stress fusion", "--steps 30 --seed 5 --stress attention"}) {
    const auto run = run_with_shim("clean", "", args + kEveryGemm);
    EXPECT_TRUE(shadow_findings(run.findings).empty()) << args << ": " << run.findings.dump(1);
    EXPECT_TRUE(checksum_findings(run.findings).empty()) << args << ": " << run.findings.dump(1);
    EXPECT_GT(run.checksums["calls_judged"].get<int>(), 0) << args;
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
