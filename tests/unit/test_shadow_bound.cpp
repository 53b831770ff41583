// The shadow check's bound (checks/detectors/shadow_bound.hpp) against its derivation: the coefficients
// worked out by hand from 8 (u ||c_i|| + u_acc sqrt(K) ||a_i|| ||B||_F) for fp32, bf16, fp16 and
// fp64; monotone in the reduction length; scaled by the output dtype's unit roundoff alone (the
// accumulation is fp32 for every reduced dtype PyTorch asks for); the accumulation probe agreeing
// with what the CPU's bf16 kernel does; and the element bound the derivation starts from holding
// for honest CPU GEMMs, the CPU's own bf16 kernel included.
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

double two_to(int e) { return std::ldexp(1.0, e); }

TEST(ShadowBound, GemmCoefficientsByHand) {
  // fp32, K = 64: 8 u = 2^-21; 8 u_acc sqrt(K) = 8 2^-24 8 = 2^-18.
  const GemmBound fp32 = gemm_bound(torch::kFloat, 64, accumulation_roundoff(torch::kFloat));
  EXPECT_EQ(fp32.per_output_norm(), two_to(-21));
  EXPECT_EQ(fp32.per_input_norms(), two_to(-18));
  // ||c_i|| = 3, ||a_i|| = 2, ||B||_F = 5: 8 2^-24 (3 + 8 * 2 * 5) = 83 2^-21.
  EXPECT_EQ(fp32.row(3, 2, 5), 83 * two_to(-21));
  // bf16, K = 256: u = 2^-8, so 8 u = 2^-5; fp32 accumulation: 8 2^-24 16 = 2^-17.
  const GemmBound bf16 = gemm_bound(torch::kBFloat16, 256, accumulation_roundoff(torch::kBFloat16));
  EXPECT_EQ(bf16.per_output_norm(), two_to(-5));
  EXPECT_EQ(bf16.per_input_norms(), two_to(-17));
  // fp16, K = 1024: u = 2^-11, so 8 u = 2^-8; 8 2^-24 32 = 2^-16.
  const GemmBound fp16 = gemm_bound(torch::kHalf, 1024, accumulation_roundoff(torch::kHalf));
  EXPECT_EQ(fp16.per_output_norm(), two_to(-8));
  EXPECT_EQ(fp16.per_input_norms(), two_to(-16));
  // fp64 data is summed in fp64: 8 2^-53 sqrt(4) = 2^-49.
  const GemmBound fp64 = gemm_bound(torch::kDouble, 4, accumulation_roundoff(torch::kDouble));
  EXPECT_EQ(fp64.per_output_norm(), two_to(-50));
  EXPECT_EQ(fp64.per_input_norms(), two_to(-49));
  EXPECT_THROW(gemm_bound(torch::kInt, 4, accumulation_roundoff(torch::kInt)),
               std::invalid_argument);  // no roundoff for integers
  // A device that sums bf16 in bf16, K = 256: 8 2^-8 16 = 2^-1; the output's term is unchanged.
  const GemmBound bf16_sums = gemm_bound(torch::kBFloat16, 256, unit_roundoff(torch::kBFloat16));
  EXPECT_EQ(bf16_sums.per_output_norm(), two_to(-5));
  EXPECT_EQ(bf16_sums.per_input_norms(), two_to(-1));
}

// The probe against what the CPU's bf16 kernel does to a long random-sign sum (K = 4096): fp32
// sums leave about the output's rounding, u / sqrt(3) ~ 0.002 of relative error; bf16 sums about
// u sqrt(K) / 2.4 ~ 0.1. Whichever this libtorch and CPU do, the probe must have said so.
TEST(ShadowBound, TheAccumulationProbeTellsHowTheCpuKernelSums) {
  EXPECT_TRUE(gemm_sums_in_float32(torch::kFloat, torch::kCPU));
  EXPECT_TRUE(gemm_sums_in_float32(torch::kDouble, torch::kCPU));
  torch::manual_seed(3);
  const auto a = torch::randn({64, 4096}).to(torch::kBFloat16), b = torch::randn({4096, 64}).to(torch::kBFloat16);
  const auto reference = torch::matmul(a.to(torch::kDouble), b.to(torch::kDouble));
  const double relative =
      ((torch::matmul(a, b).to(torch::kDouble) - reference).norm() / reference.norm()).item<double>();
  const bool fp32_sums = gemm_sums_in_float32(torch::kBFloat16, torch::kCPU);
  // The dangerous direction: a kernel summing in bf16 taken for fp32 (the bounds too tight).
  if (fp32_sums) EXPECT_LT(relative, 0.02);
  // "Sums in bf16" is conservative: some GEMM here does, though libtorch 1.13 may send large ones
  // to oneDNN, which sums in fp32 (an AVX512-BF16 CPU: this GEMM's error is 0.0017, a dot product's
  // sum stays at 1). Where this GEMM's error is bf16's, the probe must say so.
  if (relative >= 0.02) EXPECT_FALSE(fp32_sums) << "relative error " << relative;
  if (!fp32_sums) {
    auto terms = torch::full({1, 256, 1}, 1.0 / 256, torch::kBFloat16);
    terms.index_put_({0, 0, 0}, 1.0);
    const auto ones = torch::ones({1, 1, 256}, torch::kBFloat16);
    EXPECT_LT(std::min(torch::mm(ones[0], terms[0]).item<double>(), torch::bmm(ones, terms).item<double>()), 1.75)
        << "the probe says bf16 sums, but bf16 dot products here reach 2";
  }
  EXPECT_EQ(gemm_accumulation_roundoff(torch::kBFloat16, torch::kCPU),
            fp32_sums ? two_to(-24) : unit_roundoff(torch::kBFloat16));
}

TEST(ShadowBound, GrowsWithKAndScalesWithTheOutputsRoundoff) {
  double previous = 0;
  for (const int64_t k : {1, 2, 16, 100, 4096, 65536}) {
    const double now = gemm_bound(torch::kFloat, k, accumulation_roundoff(torch::kFloat)).row(1, 1, 1);
    EXPECT_GT(now, previous) << "K=" << k;
    previous = now;
    // The accumulation term goes as sqrt(K): four times K, twice the term.
    EXPECT_DOUBLE_EQ(gemm_bound(torch::kFloat, 4 * k, accumulation_roundoff(torch::kFloat)).per_input_norms(),
                     2 * gemm_bound(torch::kFloat, k, accumulation_roundoff(torch::kFloat)).per_input_norms());
    // The output's term is the dtype's u alone; the accumulation's is fp32's for every reduced dtype.
    const GemmBound fp32 = gemm_bound(torch::kFloat, k, accumulation_roundoff(torch::kFloat)),
                    bf16 = gemm_bound(torch::kBFloat16, k, accumulation_roundoff(torch::kBFloat16)),
                    fp16 = gemm_bound(torch::kHalf, k, accumulation_roundoff(torch::kHalf));
    EXPECT_EQ(bf16.per_output_norm() / fp32.per_output_norm(), two_to(16));
    EXPECT_EQ(fp16.per_output_norm() / fp32.per_output_norm(), two_to(13));
    EXPECT_EQ(bf16.per_input_norms(), fp32.per_input_norms());
    EXPECT_EQ(fp16.per_input_norms(), fp32.per_input_norms());
  }
}

TEST(ShadowBound, LayerNormElementByHand) {
  // fp32, D = 16: u = 2^-24, u_acc sqrt(D) = 2^-22. r = -1.5, bias = 0.5, w = -2, m^2 = 1.25,
  // x_hat = -0.5: 8 ((1.5 + 0.5) 2^-24 + 2 * 1.25 * 1.5 * 2^-22) = 8 * 4.25 * 2^-22 = 34 2^-22.
  const LayerNormBound fp32 = layer_norm_bound(torch::kFloat, 16);
  EXPECT_EQ(fp32.u, two_to(-24));
  EXPECT_EQ(fp32.acc, two_to(-22));
  EXPECT_EQ(fp32.element(-1.5, 0.5, -2, 1.25, -0.5), 34 * two_to(-22));
  // bf16 output: only the first term's u changes (2^-8), the sums stay fp32.
  const LayerNormBound bf16 = layer_norm_bound(torch::kBFloat16, 16);
  EXPECT_EQ(bf16.element(1, 0, 0, 1, 0), 8 * two_to(-8));
  EXPECT_EQ(bf16.acc, fp32.acc);
  EXPECT_GT(layer_norm_bound(torch::kFloat, 1024).element(1, 0, 1, 1, 1), fp32.element(1, 0, 1, 1, 1));
}

TEST(ShadowBound, RangeAndFloor) {
  EXPECT_EQ(largest_finite(torch::kHalf), 65504.0);
  EXPECT_GT(largest_finite(torch::kFloat), 3.4e38 * 0.99);
  EXPECT_EQ(bound_floor(torch::kFloat), 1e-12);
  EXPECT_EQ(bound_floor(torch::kDouble), 1e-300);
}

// The derivation's element bound, before the factor 8 that covers the projection: an honest
// result is within u |c_ij| + u_acc sqrt(K) ||a_i|| ||b_j|| of the float64 product, for
// same-sign products too (the worst case for the accumulation).
TEST(ShadowBound, HonestCpuGemmsMeetTheElementBound) {
  torch::manual_seed(7);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const int64_t k : {16, 256, 2048}) {
      for (const bool same_sign : {false, true}) {
        auto a = torch::randn({8, k}, torch::kDouble), b = torch::randn({k, 8}, torch::kDouble);
        if (same_sign) a = a.abs(), b = b.abs();
        const auto a32 = a.to(torch::kFloat), b32 = b.to(torch::kFloat);
        const auto c = torch::matmul(a32, b32).to(dtype).to(torch::kDouble);  // fp32 sums, output rounded
        const auto reference = torch::matmul(a32.to(torch::kDouble), b32.to(torch::kDouble));
        const GemmBound g = gemm_bound(dtype, k, accumulation_roundoff(dtype));
        const auto element =
            c.abs() * g.u +
            g.u_acc * g.sqrt_k * torch::outer(a32.to(torch::kDouble).norm(2, 1), b32.to(torch::kDouble).norm(2, 0));
        EXPECT_TRUE((c - reference).abs().le(element).all().item<bool>())
            << c10::toString(dtype) << " K=" << k << (same_sign ? " same-sign" : "");
      }
    }
  }
}

// The same for the CPU's own bf16 kernel, with the accumulation roundoff the probe found (bf16's
// where it sums in bf16). Same-sign sums up to K = 1/u only: past it, a bf16 sum stagnates (terms
// below half an ulp of the partial sum are dropped), which the model's GEMMs, random-sign
// products of activations and weights, do not meet.
TEST(ShadowBound, TheCpuBf16KernelMeetsTheElementBoundWithTheProbedAccumulation) {
  torch::manual_seed(11);
  const double u_acc = gemm_accumulation_roundoff(torch::kBFloat16, torch::kCPU);
  for (const int64_t k : {16, 256, 2048}) {
    for (const bool same_sign : {false, true}) {
      if (same_sign && k > 256) continue;
      auto a = torch::randn({8, k}), b = torch::randn({k, 8});
      if (same_sign) a = a.abs(), b = b.abs();
      const auto a16 = a.to(torch::kBFloat16), b16 = b.to(torch::kBFloat16);
      const auto c = torch::matmul(a16, b16).to(torch::kDouble);
      const auto a64 = a16.to(torch::kDouble), b64 = b16.to(torch::kDouble);
      const GemmBound g = gemm_bound(torch::kBFloat16, k, u_acc);
      const auto element = c.abs() * g.u + g.u_acc * g.sqrt_k * torch::outer(a64.norm(2, 1), b64.norm(2, 0));
      EXPECT_TRUE((c - torch::matmul(a64, b64)).abs().le(element).all().item<bool>())
          << "K=" << k << (same_sign ? " same-sign" : "") << " u_acc " << u_acc;
    }
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
