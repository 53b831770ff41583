// The checksum check in-process: the row and column checksums of a GEMM (checks/detectors/
// shadow_verdict.hpp, gemm_checksums) stay within their bound for honest products in every dtype,
// point at the row and column of one wrong element, catch a 1% error of a float32 output, and judge
// nothing whose inputs are not finite; the host loops agree with ATen. The model's linears report
// every GEMM of a step, forward and backward (workload/gemm_checks.hpp), with the gradients of the
// plain op. Through the real binary: tests/binary/test_shadow_check.cpp (a corrupting BLAS below
// libtorch) and the fault matrix (gemm-output-corrupt).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/workload/checkpointing.hpp"
#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

struct Product {
  torch::Tensor a, b, bias, c;
};

// c = a b (+ bias) as the device computes it in `dtype`; random-sign operands (the model's GEMMs).
Product product(torch::ScalarType dtype, int64_t m, int64_t k, int64_t n, bool with_bias, uint64_t seed) {
  torch::manual_seed(seed);
  Product p{.a = torch::randn({m, k}).to(dtype), .b = torch::randn({k, n}).to(dtype)};
  if (with_bias) p.bias = torch::randn({n}).to(dtype);
  p.c = with_bias ? torch::addmm(p.bias, p.a, p.b) : p.a.mm(p.b);
  return p;
}

std::array<double, 5> checksums(const Product& p) { return host_gemm_checksums(p.a, p.b, p.bias, p.c); }

bool caught(const std::array<double, 5>& v) { return shadow_mismatch(v[0]) || shadow_mismatch(v[2]); }

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kBFloat16, torch::kDouble};

TEST(GemmChecksums, HonestProductsStayWithinTheirBoundInEveryDtype) {
  const std::vector<std::array<int64_t, 3>> shapes = {{1024, 64, 192}, {64, 1024, 256}, {300, 33, 17}, {1, 64, 1}};
  for (const auto dtype : kDtypes)
    for (const auto& [m, k, n] : shapes)
      for (const bool with_bias : {false, true})
        for (const uint64_t seed : {1, 2, 3}) {
          const auto v = checksums(product(dtype, m, k, n, with_bias, seed));
          const auto what = ::testing::Message() << c10::toString(dtype) << " " << m << "x" << k << "x" << n
                                                 << (with_bias ? " +bias" : "") << " seed " << seed;
          EXPECT_LE(v[0], 1.0) << what;
          EXPECT_LE(v[2], 1.0) << what;
          EXPECT_EQ(v[4], 1.0) << what;
        }
}

TEST(GemmChecksums, HostLoopsAgreeWithAtenOnRatiosAndPlaces) {
  for (const auto dtype : kDtypes) {
    auto p = product(dtype, 200, 48, 70, /*with_bias=*/true, 7);
    p.c[123][45] += p.c.abs().max() + 1;  // a clear worst row and column
    const auto host = checksums(p);
    const auto aten = gemm_checksums_aten(p.a, p.b, p.bias, p.c);
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(host[i], aten[i].item<double>(), 1e-6 * std::max(1.0, std::abs(host[i])))
          << c10::toString(dtype) << " [" << i << "]";
  }
}

// The host loops run their lines in blocks through at::parallel_for, whose OpenMP region compiles
// in the caller: it spreads over libtorch's threads only with -fopenmp, which rcl_core compiles
// with and passes on to what links it (here seen in this file's own parallel_for). The blocks'
// sums are added in block order, so the verdict is the same bits on any thread count.
TEST(GemmChecksums, HostLoopsRunOnLibtorchsThreadsAndGiveTheSameBitsOnAnyCount) {
  const int saved = at::get_num_threads();
  at::set_num_threads(2);
  std::vector<int> ran_on(64, -1);
  at::parallel_for(0, 64, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ran_on[i] = at::get_thread_num();
  });
  EXPECT_EQ(std::set<int>(ran_on.begin(), ran_on.end()), (std::set<int>{0, 1}));
  for (const auto dtype : kDtypes) {
    const auto p = product(dtype, 1000, 96, 200, /*with_bias=*/true, 11);
    std::vector<std::array<double, 5>> per_count;
    for (const int threads : {1, 2, 3}) {
      at::set_num_threads(threads);
      per_count.push_back(checksums(p));
    }
    EXPECT_EQ(per_count[0], per_count[1]) << c10::toString(dtype);
    EXPECT_EQ(per_count[0], per_count[2]) << c10::toString(dtype);
  }
  at::set_num_threads(saved);
}

TEST(GemmChecksums, OneWrongElementIsFoundAtItsRowAndColumn) {
  for (const auto dtype : kDtypes)
    for (const auto& [row, column] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {511, 100}, {1023, 191}}) {
      auto p = product(dtype, 1024, 64, 192, /*with_bias=*/true, 11);
      p.c[row][column] += 100 * (p.c.abs().max() + 1);  // a flipped high exponent bit makes it larger still
      const auto v = checksums(p);
      const auto what = ::testing::Message() << c10::toString(dtype) << " at " << row << "," << column;
      EXPECT_GT(v[0], 1.0) << what;
      EXPECT_GT(v[2], 1.0) << what;
      EXPECT_EQ(v[1], double(row)) << what;
      EXPECT_EQ(v[3], double(column)) << what;
    }
}

TEST(GemmChecksums, NanFromFiniteInputsIsCaught) {
  auto p = product(torch::kFloat, 64, 32, 48, false, 5);
  p.c[10][20] = std::numeric_limits<float>::quiet_NaN();
  const auto v = checksums(p);
  EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[2]));
  EXPECT_TRUE(caught(v));
}

// A relative error over the whole output is seen where it exceeds ~8 unit roundoffs of the output
// (fp32: 5e-7); in bf16 (u = 2^-8) a 1% error is inside the rounding it may honestly make.
TEST(GemmChecksums, AWholeOutputOnePercentOffIsCaughtInFloat32) {
  auto p = product(torch::kFloat, 1024, 64, 192, true, 13);
  p.c.mul_(1.01);
  EXPECT_TRUE(caught(checksums(p)));
}

TEST(GemmChecksums, NonFiniteInputsAreNotJudged) {
  auto p = product(torch::kFloat, 64, 32, 48, true, 17);
  p.a[3][4] = std::numeric_limits<float>::infinity();
  p.c = torch::addmm(p.bias, p.a, p.b);  // rows of Inf and NaN: the non-finite detectors' business
  const auto v = checksums(p);
  EXPECT_FALSE(caught(v)) << v[0] << " " << v[2];
  EXPECT_EQ(v[4], 0.0);
}

TEST(GemmChecksums, TransposedViewsAreJudgedAsTheirContiguousCopies) {
  const auto p = product(torch::kFloat, 96, 40, 24, true, 19);
  const auto w = p.b.t().contiguous();  // a linear's weight [N, K]; the product sees its transpose
  auto c = p.c.clone();
  c[50][7] += 3 * c.abs().max();
  const auto view = host_gemm_checksums(p.a, w.t(), p.bias, c);
  const auto copy = host_gemm_checksums(p.a, p.b, p.bias, c);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(view[i], copy[i], 1e-9 * std::max(1.0, copy[i])) << i;
}

// --- the model's GEMMs as they run ---

struct RecordingObserver final : GemmObserver {
  std::vector<std::string> names;
  std::vector<std::array<double, 5>> verdicts;
  void observe_gemm(const GemmCall& call) override {
    names.push_back(call.name());
    verdicts.push_back(host_gemm_checksums(call.a, call.b, call.bias, call.c));
  }
};

TEST(ObservedLinear, GradientsAndOutputAreThePlainLinears) {
  for (const bool with_bias : {true, false})
    for (const auto precision : {Precision::fp32, Precision::bf16}) {
      torch::manual_seed(3);
      const auto x = torch::randn({2, 5, 8}), w = torch::randn({6, 8});
      const auto b = with_bias ? torch::randn({6}) : torch::Tensor();
      auto run = [&](bool observed) {
        const auto xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
        const auto bi = with_bias ? b.clone().requires_grad_(true) : torch::Tensor();
        RecordingObserver observer;
        torch::Tensor y;
        {
          const ObservedGemms armed(observed ? &observer : nullptr);
          const AutocastGuard autocast(torch::kCPU, autocast_for(precision));
          y = observed_linear(xi, wi, bi, "mlp.up");
        }
        y.to(torch::kFloat).square().sum().backward();
        return std::vector<torch::Tensor>{y, xi.grad(), wi.grad(), with_bias ? bi.grad() : torch::zeros({1})};
      };
      const auto plain = run(false), observed = run(true);
      for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_EQ(plain[i].scalar_type(), observed[i].scalar_type()) << i;
        // fp32: the same products; bf16: the bias may be added before or after the output's rounding
        // (one bf16 ulp on some elements), so within a bf16 roundoff over the whole tensor.
        const auto reference = plain[i].to(torch::kDouble);
        const double tolerance = precision == Precision::fp32 ? 1e-6 : 1.0 / 128;
        EXPECT_LE((observed[i].to(torch::kDouble) - reference).norm().item<double>(),
                  tolerance * reference.norm().item<double>())
            << name_of(precision) << (with_bias ? " +bias" : "") << " output/grad " << i;
      }
    }
}

TEST(ObservedLinear, ReportsItsForwardAndBothBackwardGemmsNamedByTheirBlock) {
  torch::manual_seed(4);
  const auto x = torch::randn({3, 4, 8}).requires_grad_(true), w = torch::randn({5, 8}).requires_grad_(true);
  const auto b = torch::randn({5}).requires_grad_(true);
  RecordingObserver observer;
  {
    const ObservedGemms armed(&observer);
    const GemmLayerScope layer(3);
    observed_linear(x, w, b, "attn.qkv").sum().backward();
  }
  EXPECT_EQ(observer.names, (std::vector<std::string>{"block3.attn.qkv forward", "block3.attn.qkv backward dX",
                                                      "block3.attn.qkv backward dW"}));
  for (const auto& v : observer.verdicts) EXPECT_FALSE(caught(v));
  observer.names.clear();
  observed_linear(x, w, b, "attn.qkv").sum().backward();  // disarmed: the plain op, nothing reported
  EXPECT_TRUE(observer.names.empty());
}

TEST(ObservedLinear, ACheckpointedRecomputationIsObservedAsItsForwardWas) {
  torch::manual_seed(5);
  const auto x = torch::randn({2, 4, 8}).requires_grad_(true), w = torch::randn({8, 8}).requires_grad_(true);
  RecordingObserver observer;
  torch::Tensor y;
  {
    const ObservedGemms armed(&observer);
    y = checkpoint([&](const torch::Tensor& in) { return observed_linear(in, w, {}, "mlp.down"); }, x);
  }
  y.sum().backward();  // outside the armed scope: the replay re-arms what the forward ran under
  EXPECT_EQ(observer.names, (std::vector<std::string>{"mlp.down forward", "mlp.down forward", "mlp.down backward dX",
                                                      "mlp.down backward dW"}));
}

TEST(ObservedLinear, EveryLinearOfTheModelReportsItsThreeGemmsAndAllAreClean) {
  TrainingConfig cfg;
  cfg.hidden_size = 16;
  cfg.num_heads = 2;
  cfg.num_layers = 2;
  cfg.seq_len = 8;
  cfg.vocab_size = 29;
  torch::manual_seed(6);
  GPT model(testing::on_the_cpu(cfg));
  const auto tokens = torch::randint(cfg.vocab_size, {2, cfg.seq_len}, torch::kLong);
  RecordingObserver observer;
  {
    const ObservedGemms armed(&observer);
    model->forward(tokens).to(torch::kFloat).logsumexp(-1).mean().backward();
  }
  std::set<std::string> names(observer.names.begin(), observer.names.end());
  for (const std::string site : {"attn.qkv", "attn.proj", "mlp.up", "mlp.down"})
    for (const std::string layer : {"block0.", "block1."})
      for (const std::string pass : {" forward", " backward dX", " backward dW"})
        EXPECT_TRUE(names.count(layer + site + pass)) << layer + site + pass;
  for (const std::string pass : {" forward", " backward dX", " backward dW"})
    EXPECT_TRUE(names.count("lm_head" + pass)) << pass;
  EXPECT_EQ(observer.names.size(), 27u);
  for (size_t i = 0; i < observer.verdicts.size(); ++i) EXPECT_FALSE(caught(observer.verdicts[i])) << observer.names[i];
}

// The float32 path of a CPU without a native bf16 GEMM (workload/precision.hpp): every GEMM of a
// bf16 step stays within the checksums' bound, and one wrong element is still caught.
TEST(ObservedLinear, Bf16GemmsComputedInFloat32AreCleanAndAWrongOneIsCaught) {
  const ReducedGemmInFloat32 path(torch::kBFloat16, true);
  TrainingConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_heads = 2;
  cfg.num_layers = 2;
  cfg.seq_len = 16;
  cfg.vocab_size = 29;
  torch::manual_seed(8);
  GPT model(testing::on_the_cpu(cfg));
  const auto tokens = torch::randint(cfg.vocab_size, {2, cfg.seq_len}, torch::kLong);
  for (const bool corrupt : {false, true}) {
    RecordingObserver observer;
    {
      const ObservedGemms armed(&observer);
      torch::Tensor loss;
      {
        const AutocastGuard autocast(torch::kCPU, autocast_for(Precision::bf16));
        if (corrupt) corrupt_next_gemm(GemmPass::grad_weight);
        loss = model->forward(tokens).to(torch::kFloat).logsumexp(-1).mean();
      }
      loss.backward();
    }
    ASSERT_EQ(observer.names.size(), 27u);
    int wrong = 0;
    for (size_t i = 0; i < observer.verdicts.size(); ++i) {
      wrong += caught(observer.verdicts[i]);
      if (!corrupt) EXPECT_FALSE(caught(observer.verdicts[i])) << observer.names[i];
    }
    EXPECT_EQ(wrong, corrupt ? 1 : 0);
  }
}

// The GEMMs an armed observer hears from a chunked loss over 7 tokens and its backward, which
// runs outside the armed scope: a recomputation re-arms what the forward ran under. None is caught.
std::vector<std::string> chunked_loss_gemms(int64_t chunk_tokens) {
  torch::manual_seed(7);
  const auto hidden = torch::randn({7, 8}).requires_grad_(true), table = torch::randn({13, 8}).requires_grad_(true);
  const auto targets = torch::randint(13, {7}, torch::kLong);
  RecordingObserver observer;
  torch::Tensor loss;
  {
    const ObservedGemms armed(&observer);
    loss = chunked_lm_loss(hidden, table, targets, {}, chunk_tokens);
  }
  loss.backward();
  for (size_t i = 0; i < observer.verdicts.size(); ++i) EXPECT_FALSE(caught(observer.verdicts[i])) << observer.names[i];
  return observer.names;
}

TEST(ObservedLinear, TheChunkedLossReportsEachChunksHeadGemmsAndItsRecomputation) {
  std::vector<std::string> expected(3, "lm_head forward");
  for (int chunk = 0; chunk < 3; ++chunk)
    expected.insert(expected.end(), {"lm_head forward", "lm_head backward dX", "lm_head backward dW"});
  EXPECT_EQ(chunked_loss_gemms(/*chunk_tokens=*/3), expected);
}

// A lone chunk keeps its forward graph: its backward runs the head's two gradient GEMMs and no
// recomputed forward (the gradients equal the whole batch's: test_model.cpp's LmHead tests).
TEST(ObservedLinear, TheChunkedLossDoesNotRecomputeALoneChunk) {
  EXPECT_EQ(chunked_loss_gemms(/*chunk_tokens=*/7),
            (std::vector<std::string>{"lm_head forward", "lm_head backward dX", "lm_head backward dW"}));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
