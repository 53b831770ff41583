// The shadow check's verdict in-process (checks/detectors/shadow_verdict.hpp): its bound holds for honest
// GEMMs and LayerNorms in every dtype and catches NaN, a large value and a 1% error; the host
// loops' verdict equals ATen's; the model reports its GEMMs and norms through its taps only while
// observed. Through the real binary with a corrupting BLAS below libtorch:
// tests/binary/test_shadow_check.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include <torch/torch.h>

#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

// [worst ratio, relative error, all judged] as host values.
struct Judged {
  bool mismatch;
  double worst;
};

Judged judge(const TappedOp& op, const torch::Tensor& output = {}) {
  const double worst = shadow_verdict(op, output)[0].item<double>();
  return {shadow_mismatch(worst), worst};
}

TappedOp linear_op(torch::ScalarType dtype, int64_t tokens, int64_t k, int64_t n, bool positive, uint64_t seed) {
  torch::manual_seed(seed);
  auto draw = [&](std::vector<int64_t> shape) {
    auto t = torch::randn(shape, torch::kDouble);
    return (positive ? t.abs() : t).to(dtype);
  };
  TappedOp op{.kind = TappedOp::Kind::linear, .inputs = {draw({2, tokens / 2, k}), draw({n, k}), draw({n})}};
  op.output = op.rerun();
  return op;
}

// On the CPU the verdict is plain loops (host_verdict); on a GPU it is ATen ops. Both must say
// the same of the same op: the worst ratio to 1e-6 relative (norms summed in another order),
// the relative error likewise, the judged flag exactly; NaN where the other says NaN.
void expect_same_verdict(const TappedOp& op, const torch::Tensor& output, const std::string& what) {
  const auto host = host_verdict(op, output);
  const auto aten = shadow_verdict_aten(op, output);
  for (int i = 0; i < 3; ++i) {
    const double a = aten[i].item<double>(), h = host[i];
    if (std::isnan(a) || std::isnan(h)) {
      EXPECT_TRUE(std::isnan(a) && std::isnan(h)) << what << " [" << i << "]: aten " << a << " host " << h;
      continue;
    }
    EXPECT_NEAR(h, a, 1e-6 * std::max(1.0, std::abs(a)) + 1e-12) << what << " [" << i << "]";
  }
  EXPECT_EQ(shadow_mismatch(host[0]), shadow_mismatch(aten[0].item<double>())) << what;
}

// Each op clean, then with its output corrupted: NaN, one large element, 1% of one row.
void expect_same_verdicts(const TappedOp& op, const std::string& what) {
  expect_same_verdict(op, op.output, what + " clean");
  auto nan = op.output.clone();
  nan.view(-1)[3] = std::numeric_limits<double>::quiet_NaN();
  expect_same_verdict(op, nan, what + " NaN");
  auto large = op.output.clone();
  large.view(-1)[7] = 1e4;
  expect_same_verdict(op, large, what + " large");
  auto row = op.output.clone();
  row.view(-1).narrow(0, 0, op.output.size(-1)).mul_(1.01);
  expect_same_verdict(op, row, what + " 1% row");
}

struct Recorder final : OpObserver {
  std::vector<TappedOp> ops;
  void observe(const TappedOp& op) override { ops.push_back(op); }
};

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
  TappedOp av{.kind = TappedOp::Kind::matmul, .inputs = {probs, torch::randn({2, 4, 64, 16})}};
  av.output = av.rerun();
  EXPECT_FALSE(judge(av).mismatch) << judge(av).worst;
}

TEST(ShadowBound, HonestLayerNormStaysInsideTheBound) {
  torch::manual_seed(5);
  for (const double shift : {0.0, 30.0}) {  // a large mean stresses the variance
    TappedOp ln{.kind = TappedOp::Kind::layer_norm,
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
    TappedOp op{.kind = TappedOp::Kind::matmul,
                .inputs = {torch::full({4, 64}, value).to(torch::kHalf), torch::full({64, 8}, value).to(torch::kHalf)}};
    op.output = inf;
    EXPECT_EQ(judge(op).mismatch, value == 1.0) << value;
  }
}

TEST(ShadowHostVerdict, EqualsTheAtenVerdictForEveryOpShapeAndDtype) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
    const std::string name = c10::toString(dtype);
    auto linear = linear_op(torch::kDouble, 64, 48, 40, false, 31);  // values drawn in float64, cast below
    for (auto& t : linear.inputs) t = t.to(dtype);
    linear.output =
        torch::nn::functional::linear(linear.inputs[0].to(torch::kFloat), linear.inputs[1].to(torch::kFloat),
                                      linear.inputs[2].to(torch::kFloat))
            .to(dtype);
    expect_same_verdicts(linear, "linear " + name);
    auto no_bias = linear;
    no_bias.inputs[2] = torch::Tensor();
    no_bias.output = (linear.output.to(torch::kFloat) - linear.inputs[2].to(torch::kFloat)).to(dtype);
    expect_same_verdicts(no_bias, "linear without bias " + name);
    // Attention's batched matmuls: Q Kᵀ with Kᵀ a transposed view, both operands strided.
    torch::manual_seed(32);
    const auto q = torch::randn({2, 8, 3, 16}).transpose(1, 2).to(dtype), k = torch::randn({2, 3, 8, 16}).to(dtype);
    TappedOp scores{.kind = TappedOp::Kind::matmul, .inputs = {q, k.transpose(-2, -1)}};
    scores.output = at::matmul(q.to(torch::kFloat), k.transpose(-2, -1).to(torch::kFloat)).to(dtype);
    expect_same_verdicts(scores, "batched matmul " + name);
    // A batched activation times one shared matrix (broadcast batch).
    TappedOp shared{.kind = TappedOp::Kind::matmul,
                    .inputs = {torch::randn({3, 5, 16}).to(dtype), torch::randn({16, 9}).to(dtype)}};
    shared.output = at::matmul(shared.inputs[0].to(torch::kFloat), shared.inputs[1].to(torch::kFloat)).to(dtype);
    expect_same_verdicts(shared, "broadcast matmul " + name);
    // LayerNorm, contiguous and on a transposed (strided) input; a large mean stresses the variance.
    for (const bool strided : {false, true}) {
      auto x = (torch::randn({4, 6, 32}) + 30.0);
      if (strided) x = torch::randn({4, 32, 6}).transpose(1, 2) + 30.0;
      TappedOp ln{.kind = TappedOp::Kind::layer_norm,
                  .inputs = {x.to(dtype), torch::randn({32}).to(dtype), torch::randn({32}).to(dtype)},
                  .eps = 1e-5};
      ln.output =
          at::layer_norm(x, {32}, ln.inputs[1].to(torch::kFloat), ln.inputs[2].to(torch::kFloat), 1e-5).to(dtype);
      expect_same_verdicts(ln, std::string("layer_norm ") + (strided ? "strided " : "") + name);
    }
  }
  // Non-finite inputs are not judged, by either.
  auto op = linear_op(torch::kFloat, 64, 32, 24, false, 33);
  op.inputs[0] = op.inputs[0].clone();
  op.inputs[0].view(-1)[0] = std::numeric_limits<float>::infinity();
  expect_same_verdict(op, op.output, "Inf input");
  EXPECT_EQ(host_verdict(op)[2], 0.0);
}

// The model reports every GEMM and LayerNorm it runs while an observer is armed, and nothing
// when none is: per layer LayerNorm, QKV, QKᵀ, PV, output projection, LayerNorm, MLP up and down;
// then the final LayerNorm and the LM head. Under bf16 autocast the op as computed has bf16
// operands, the weights cast as autocast casts them.
TEST(OpTap, TheModelReportsItsGemmsAndNormsOnlyWhileObserved) {
  const TrainingConfig cfg = {.hidden_size = 16,
                              .num_layers = 2,
                              .seq_len = 8,
                              .num_heads = 2,
                              .vocab_size = 11,
                              .attention_backend = AttentionBackend::math};  // QK^T and PV as tapped GEMMs
  torch::manual_seed(34);
  GPT model(cfg);
  const auto tokens = torch::randint(cfg.vocab_size, {2, cfg.seq_len}, torch::kLong);
  Recorder recorder;
  model->forward(tokens);
  EXPECT_TRUE(recorder.ops.empty());
  using K = TappedOp::Kind;
  const std::vector<K> layer = {K::layer_norm, K::linear,     K::matmul, K::matmul,
                                K::linear,     K::layer_norm, K::linear, K::linear};
  std::vector<K> expected;
  for (int i = 0; i < cfg.num_layers; ++i) expected.insert(expected.end(), layer.begin(), layer.end());
  expected.push_back(K::layer_norm);
  expected.push_back(K::linear);
  {
    ObservedOps armed(recorder);
    model->forward(tokens);
  }
  ASSERT_EQ(recorder.ops.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(recorder.ops[i].kind, expected[i]) << i << ": " << recorder.ops[i].describe();
    // Each report is the op as it ran: recomputing it gives the same output.
    EXPECT_TRUE(torch::allclose(recorder.ops[i].rerun(), recorder.ops[i].output, 1e-5, 1e-6))
        << recorder.ops[i].describe();
  }
  model->forward(tokens);
  EXPECT_EQ(recorder.ops.size(), expected.size());  // disarmed again

  recorder.ops.clear();
  {
    AutocastGuard bf16(torch::kCPU, AutocastState{true, torch::kBFloat16});
    ObservedOps armed(recorder);
    model->forward(tokens);
  }
  const auto& qkv = recorder.ops.at(1);
  ASSERT_EQ(qkv.kind, K::linear);
  EXPECT_EQ(qkv.output.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(qkv.inputs[1].scalar_type(), torch::kFloat);  // the model's float32 weight
  const auto computed = qkv.as_computed();
  ASSERT_TRUE(computed.has_value());
  for (const auto& t : computed->inputs) EXPECT_EQ(t.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(computed->rerun(), qkv.output)) << "autocast's GEMM, recomputed on the cast operands";
  EXPECT_FALSE(shadow_mismatch(host_verdict(*computed)[0]));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
