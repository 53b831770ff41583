// Mixed precision: the autocast guard's region and restore semantics, and the fp16 dynamic
// loss scaler (CPU cannot run fp16 matmuls, so the scaler is proven on its own tensors,
// including a real fp16 gradient overflow it must back off from and recover).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TEST(Autocast, MixedPrecisionNamesMapToStates) {
  EXPECT_FALSE(autocast_for(Precision::fp32).enabled);
  EXPECT_TRUE(autocast_for(Precision::bf16).enabled);
  EXPECT_EQ(autocast_for(Precision::bf16).dtype, torch::kBFloat16);
  EXPECT_EQ(autocast_for(Precision::fp16).dtype, torch::kHalf);
}

TEST(Autocast, GuardCastsMatmulsInsideAndRestoresOnExit) {
  const auto a = torch::randn({4, 4}), b = torch::randn({4, 4});
  ASSERT_FALSE(current_autocast(torch::kCPU).enabled);
  {
    AutocastGuard outer(torch::kCPU, autocast_for(Precision::bf16));
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard inner(torch::kCPU, autocast_for(Precision::fp32));  // a region that opts out
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
    }
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(current_autocast(torch::kCPU).enabled);
  }
  EXPECT_FALSE(current_autocast(torch::kCPU).enabled);
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
}

TEST(Autocast, BackwardOutsideTheRegionGivesFloat32Gradients) {
  auto w = torch::randn({8, 8}, torch::requires_grad());
  const auto x = torch::randn({2, 8});
  torch::Tensor loss;
  {
    AutocastGuard guard(torch::kCPU, autocast_for(Precision::bf16));
    loss = torch::mm(x, w).to(torch::kFloat).pow(2).mean();
  }
  loss.backward();
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);  // parameters stay float32
  EXPECT_TRUE(torch::isfinite(w.grad()).all().item<bool>());
}

TEST(LossScaler, ScalesLossAndUnscalesGradients) {
  DynamicLossScaler scaler(1024.0, 100);
  auto w = torch::ones({3}, torch::requires_grad());
  scaler.scale((w * torch::tensor({1.0f, 2.0f, 3.0f})).sum()).backward();
  EXPECT_TRUE(torch::equal(w.grad(), torch::tensor({1024.0f, 2048.0f, 3072.0f})));
  EXPECT_FALSE(scaler.unscale_and_check(w.grad()));
  EXPECT_TRUE(torch::equal(w.grad(), torch::tensor({1.0f, 2.0f, 3.0f})));
}

TEST(LossScaler, DetectsInfAndNanInAnyElement) {
  DynamicLossScaler scaler(1.0, 100);
  EXPECT_FALSE(scaler.unscale_and_check(torch::ones({5})));
  EXPECT_TRUE(scaler.unscale_and_check(torch::tensor({0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()})));
  EXPECT_TRUE(scaler.unscale_and_check(torch::tensor({-std::numeric_limits<float>::infinity(), 0.0f})));
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  DynamicLossScaler scaler(1024.0, 3);
  scaler.update(true, 1);
  EXPECT_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  scaler.update(false, 2);
  scaler.update(false, 3);
  EXPECT_EQ(scaler.current_scale(), 512.0);
  scaler.update(true, 4);  // an overflow resets the clean streak
  EXPECT_EQ(scaler.current_scale(), 256.0);
  for (int64_t step = 5; step <= 7; ++step) scaler.update(false, step);
  EXPECT_EQ(scaler.current_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

// fp16 gradients overflow for real: with |dL/dw| = 3 a scale of 65536 gives 196608 > 65504
// (fp16 max), and so does 32768; at 16384 the step goes through. The scaler must skip twice,
// leave the weights untouched while skipping, then train to the solution and regrow its scale.
TEST(LossScaler, RecoversFromRealFp16OverflowAndKeepsTraining) {
  DynamicLossScaler scaler(65536.0, 5);
  auto w = torch::zeros({4}, torch::TensorOptions().dtype(torch::kHalf).requires_grad(true));
  const auto target = torch::tensor({1.5, -1.5, 1.5, -1.5}).to(torch::kHalf);
  std::vector<bool> skipped;
  for (int64_t step = 1; step <= 40; ++step) {
    w.mutable_grad() = torch::Tensor();
    // float32 loss as autocast produces it; the cast back to w's dtype makes the grads fp16.
    const auto loss = (w.to(torch::kFloat) - target.to(torch::kFloat)).pow(2).sum();  // dL/dw = 2(w - t) = -3, 3
    scaler.scale(loss).backward();
    ASSERT_EQ(w.grad().scalar_type(), torch::kHalf);
    const auto before = w.detach().clone();
    const bool overflow = scaler.unscale_and_check(w.grad());
    if (!overflow) {
      torch::NoGradGuard no_grad;
      w.sub_(w.grad() * 0.1);
    } else {
      EXPECT_TRUE(torch::equal(before, w.detach()));
    }
    scaler.update(overflow, step);
    skipped.push_back(overflow);
  }
  EXPECT_EQ(std::vector<bool>(skipped.begin(), skipped.begin() + 3), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_TRUE(torch::allclose(w.detach().to(torch::kFloat), target.to(torch::kFloat), 0, 1e-2));
  EXPECT_GT(scaler.current_scale(), 16384.0);  // grew back after clean streaks
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
