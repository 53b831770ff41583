// The shadow check (diagnostics/shadow_check.hpp): its bound holds for honest GEMMs and
// LayerNorms in every dtype and catches NaN, a large value and a 1% error; through the real
// binary, a BLAS below libtorch that corrupts one GEMM shape (the LD_PRELOAD shim in
// tests/shim/) is reported within 10 steps, and clean runs report nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli_runner.hpp"
#include "rocm_conformance_llm/diagnostics/shadow_check.hpp"

namespace rcl {
namespace {

using rcl::testing::fresh_dir;
using rcl::testing::kSmokeCpu;
using rcl::testing::read_text;
using rcl::testing::run_cli;

// [worst ratio, relative error, all judged] as host values.
struct Judged {
  bool mismatch;
  double worst;
};
Judged judge(const ShadowOp& op, const torch::Tensor& output = {}) {
  const double worst = shadow_verdict(op, output)[0].item<double>();
  return {shadow_mismatch(worst), worst};
}

ShadowOp linear_op(torch::ScalarType dtype, int64_t tokens, int64_t k, int64_t n, bool positive, uint64_t seed) {
  torch::manual_seed(seed);
  auto draw = [&](std::vector<int64_t> shape) {
    auto t = torch::randn(shape, torch::kDouble);
    return (positive ? t.abs() : t).to(dtype);
  };
  ShadowOp op{.kind = ShadowOp::Kind::linear, .inputs = {draw({2, tokens / 2, k}), draw({n, k}), draw({n})}};
  op.output = op.rerun();
  return op;
}

TEST(ShadowBound, HonestGemmsStayInsideTheBound) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble})
    for (const int64_t k : {16, 64, 1024, 4096})
      for (const bool positive : {false, true}) {
        const auto op = linear_op(dtype, 64, k, 96, positive, 7 + k);
        const auto j = judge(op);
        EXPECT_FALSE(j.mismatch) << op.describe() << (positive ? " positive" : "") << ": " << j.worst;
        EXPECT_LT(j.worst, 1.0) << op.describe();
      }
  // Attention's batched matmuls, softmax-like rows (non-negative, summing to 1) times values.
  torch::manual_seed(3);
  const auto probs = torch::softmax(torch::randn({2, 4, 64, 64}) * 4, -1);
  ShadowOp av{.kind = ShadowOp::Kind::matmul, .inputs = {probs, torch::randn({2, 4, 64, 16})}};
  av.output = av.rerun();
  EXPECT_FALSE(judge(av).mismatch) << judge(av).worst;
}

TEST(ShadowBound, HonestLayerNormStaysInsideTheBound) {
  torch::manual_seed(5);
  for (const double shift : {0.0, 30.0}) {  // a large mean stresses the variance
    ShadowOp ln{.kind = ShadowOp::Kind::layer_norm,
                .inputs = {torch::randn({8, 32, 256}) + shift, torch::randn({256}), torch::randn({256})},
                .eps = 1e-5};
    ln.output = ln.rerun();
    const auto j = judge(ln);
    EXPECT_FALSE(j.mismatch) << "shift " << shift << ": " << j.worst;
  }
}

TEST(ShadowBound, NanLargeAndOnePercentAreCaught) {
  const auto op = linear_op(torch::kFloat, 64, 256, 96, false, 11);
  auto nan = op.output.clone();
  nan.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(judge(op, nan).mismatch);
  auto large = op.output.clone();
  large.view(-1)[5] = 1e6;
  EXPECT_TRUE(judge(op, large).mismatch);
  EXPECT_TRUE(judge(op, op.output * 1.01).mismatch);
  EXPECT_GT(judge(op, op.output * 1.01).worst, 10.0);  // far outside, not at the edge
  // One output row 1% off.
  auto row = op.output.clone();
  row[0][3].mul_(1.01);
  EXPECT_TRUE(judge(op, row).mismatch);
  // bf16: NaN and large are caught; 1% (2.5 ulps of bf16) is within rounding and is not.
  const auto bf = linear_op(torch::kBFloat16, 64, 256, 96, false, 12);
  auto bf_large = bf.output.clone();
  bf_large.view(-1)[0] = 1e6;
  EXPECT_TRUE(judge(bf, bf_large).mismatch);
  EXPECT_FALSE(judge(bf, bf.output * 1.01).mismatch);
  // Inputs that are already non-finite are the non-finite detectors' business.
  auto bad_input = op;
  bad_input.inputs[0] = op.inputs[0].clone();
  bad_input.inputs[0].view(-1)[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(judge(bad_input, nan).mismatch);
}

// fp16: 64 products of 100 x 100 make 640000, past fp16's 65504, so Inf is the honest answer;
// with inputs of 1 the result is 64 and Inf is a wrong result.
TEST(ShadowBound, HonestFp16OverflowIsNotAWrongResult) {
  const auto inf = torch::full({4, 8}, std::numeric_limits<float>::infinity()).to(torch::kHalf);
  for (const double value : {100.0, 1.0}) {
    ShadowOp op{.kind = ShadowOp::Kind::matmul,
                .inputs = {torch::full({4, 64}, value).to(torch::kHalf), torch::full({64, 8}, value).to(torch::kHalf)}};
    op.output = inf;
    EXPECT_EQ(judge(op).mismatch, value == 1.0) << value;
  }
}

// --- through the real binary, with the BLAS shim below libtorch ---

struct ShimRun {
  int exit_code = -1;
  nlohmann::json findings;
  std::string shim_log;
};

// smoke on CPU, fp32 (bf16 GEMMs do not reach BLAS on this libtorch: see docs/fault-injection.md).
// The QKV projection of the smoke model: y = x W^T with 1024 tokens, 64 in, 192 out, which
// libtorch passes to sgemm_ as m = 192, n = 1024, k = 64 (no other GEMM of the step has it).
ShimRun run_with_shim(const std::string& name, const std::string& shim_env, const std::string& args) {
  const auto dir = fresh_dir("shadow", name);
  const auto log = dir.string() + ".shim";
  const std::string env = "LD_PRELOAD=" RCL_BLAS_SHIM " RCL_SHIM_M=192 RCL_SHIM_N=1024 RCL_SHIM_K=64 RCL_SHIM_LOG=" +
                          log + " " + shim_env;
  const auto r = run_cli(kSmokeCpu + args + " --output-dir " + dir.string(), env);
  ShimRun out{.exit_code = r.exit_code};
  out.findings = nlohmann::json::parse(read_text(dir / "report.json"))["findings"];
  out.shim_log = read_text(log);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(log);
  return out;
}

std::vector<nlohmann::json> shadow_findings(const nlohmann::json& findings) {
  std::vector<nlohmann::json> out;
  for (const auto& f : findings)
    if (f["signature"] == "gemm_shadow_mismatch") out.push_back(f);
  return out;
}

// One call of the QKV shape before step 1 (the GEMM canary's own), then two per step
// (one per layer): call 2s is step s's first. Corrupted from step 5 on, every mode is caught within 10 steps, named, reproducible.
TEST(ShadowCheckRun, ShimCorruptionOfOneShapeIsCaughtWithinTenSteps) {
  constexpr int kInjectStep = 5;
  for (const std::string mode : {"nan", "large", "rel"}) {
    const auto run = run_with_shim(mode, "RCL_SHIM_MODE=" + mode + " RCL_SHIM_SCHEDULE=from RCL_SHIM_CALL=" +
                                             std::to_string(2 * kInjectStep),
                                   "--steps 16");
    ASSERT_NE(run.shim_log.find("call " + std::to_string(2 * kInjectStep)), std::string::npos) << run.shim_log;
    const auto found = shadow_findings(run.findings);
    ASSERT_FALSE(found.empty()) << mode << ": " << run.findings.dump(1);
    const auto& first = found.front();
    EXPECT_EQ(first["component"], "rocBLAS/hipBLASLt");
    EXPECT_EQ(first["severity"], "fail");
    EXPECT_GE(first["step"].get<int>(), kInjectStep) << mode;
    EXPECT_LE(first["step"].get<int>() - kInjectStep, 10) << mode;
    // libtorch's C++ nn::Linear: a matmul with the transposed weight.
    EXPECT_NE(first["evidence"]["op"].get<std::string>().find("aten::matmul [16, 64, 64] x [64, 192]"),
              std::string::npos)
        << first.dump();
    EXPECT_TRUE(first["reproducible"].get<bool>()) << mode;
    EXPECT_EQ(first["classification"], "persistent") << mode;
    EXPECT_EQ(run.exit_code, 1) << mode;
  }
}

// Corrupted once, at a call the rotation checks (step 9 checks QKV: calls 18 and 19): caught, and
// the re-run is correct, so not reproducible: a transient fault, a warning whose action is to run
// the validation again (capped like every re-run anomaly), and the run passes.
TEST(ShadowCheckRun, OneCorruptedCallIsCaughtWhenCheckedAndIsNotReproducible) {
  const auto run = run_with_shim("once", "RCL_SHIM_MODE=rel RCL_SHIM_SCHEDULE=once RCL_SHIM_CALL=19",
                                 "--steps 12");
  const auto found = shadow_findings(run.findings);
  ASSERT_EQ(found.size(), 1u) << run.findings.dump(1);
  EXPECT_EQ(found[0]["step"], 9);
  EXPECT_EQ(found[0]["evidence"]["occurrence"], 1);  // layer 1
  EXPECT_FALSE(found[0]["reproducible"].get<bool>());
  EXPECT_EQ(found[0]["classification"], "transient");
  EXPECT_EQ(found[0]["action"], "rerun");
  EXPECT_EQ(found[0]["severity"], "warn");
  EXPECT_NE(found[0]["message"].get<std::string>().find("[re-run: transient"), std::string::npos) << found[0];
  EXPECT_EQ(run.exit_code, 0);
}

// Corrupted every 3rd call of the shape: the checks of steps 9 and 30 meet a corrupted call (one
// call is checked per step, so an intermittent fault is met only now and then), each re-run is
// correct (transient), but the second transient of the run is an intermittent fault, not a
// one-off: it fails, action isolate_node, and so does the run.
TEST(ShadowCheckRun, IntermittentCorruptionFailsAtItsSecondTransient) {
  const auto run = run_with_shim("intermittent", "RCL_SHIM_MODE=rel RCL_SHIM_SCHEDULE=every RCL_SHIM_CALL=10 RCL_SHIM_EVERY=3",
                                 "--steps 32");
  const auto found = shadow_findings(run.findings);
  ASSERT_GE(found.size(), 2u) << run.findings.dump(1);
  for (const auto& f : found) EXPECT_EQ(f["classification"], "transient") << f;
  EXPECT_EQ(found[0]["severity"], "warn");
  EXPECT_EQ(found[0]["action"], "rerun");
  EXPECT_EQ(found[1]["severity"], "fail");
  EXPECT_EQ(found[1]["action"], "isolate_node");
  EXPECT_EQ(run.exit_code, 1);
}

// The shim loaded but off, and no shim at all: fp32 and bf16, several seeds and modes.
TEST(ShadowCheckRun, CleanRunsReportNothing) {
  for (const std::string args : {"--steps 40 --seed 1", "--steps 40 --seed 2 --precision bf16",
                                 "--steps 30 --seed 3 --stress all", "--steps 30 --seed 4 --stress all --precision fp32",
                                 "--steps 30 --seed 5 --stress attention"}) {
    const auto run = run_with_shim("clean", "", args);
    EXPECT_TRUE(shadow_findings(run.findings).empty()) << args << ": " << run.findings.dump(1);
  }
}

}  // namespace
}  // namespace rcl
