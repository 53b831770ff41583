// The shadow check's bound (checks/detectors/shadow_check.hpp): how far an honest GEMM or LayerNorm result
// in a given dtype may be from its float64 recomputation, from the dtype's unit roundoff and
// the reduction length. Pure arithmetic; the check applies it per row (GEMM) or per element
// (LayerNorm), on tensors or in host loops.
//
// The GEMM bound (C = A B (+ bias), A: M x K, B: K x N, output dtype with unit roundoff u,
// accumulation roundoff u_acc (2^-24: fp32, unless the device is seen to sum in the dtype itself,
// gemm_sums_in_float32 below); projected on a fixed +-1 vector x, so the float64 work is
// O(MK + KN + MN), not O(MNK)):
//   for every row i:  |(C x)_i - (A (B x))_i - bias . x|  <=  8 (u ||c_i|| + u_acc sqrt(K) ||a_i|| ||B||_F)
// Derivation: an honest element error is at most u|c_ij| (rounding the output) plus the
// accumulation error, <= u_acc sqrt(K) ||a_i|| ||b_j|| (a sequential FMA sum of random-sign
// products stays near u_acc ||a_i|| ||b_j|| / 2.4; same-sign products reach u_acc sqrt(K)/3 of
// it). So the row's error vector e_i has ||e_i|| <= the bracket; x's signs do not depend on e,
// so |e_i . x| has standard deviation ||e_i|| and exceeds 8 ||e_i|| with probability below
// 2 exp(-32) (Hoeffding). What it catches: NaN/Inf from finite inputs, any element off by more
// than ~8 u ||c_i|| (fp32: a 1% error of every element, or one element 1e6 off), in every
// dtype; a 1% error in a bf16 output (2.5 bf16 ulps) is inside the bound and is not reported.
// LayerNorm, per element, with D = normalized size, m_i = rms(x_i) / sqrt(var_i + eps) >= 1:
//   |y - r| <= 8 (u (|r| + |bias|) + u_acc sqrt(D) |w| m_i^2 (1 + |x_hat|))
// (the mean and variance are fp32 sums of D terms; a one-pass variance loses m_i^2 relative).
#pragma once

#include <cmath>
#include <cstdint>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace rcl {

inline constexpr double kShadowBoundFactor = 8.0;  // Hoeffding: P(|e . x| > 8 ||e||) < 2 exp(-32)

// The unit roundoff of the sums inside a norm in `dtype`: fp32 (float64 data: float64).
double accumulation_roundoff(c10::ScalarType dtype);

// Whether `device` sums the products of a bf16/fp16 GEMM in fp32, as PyTorch asks of every
// backend (TF32/xf32 off by default), or in the dtype itself: a known-answer GEMM, 1 followed by
// 1/u - 1 terms of u, is ~2 when summed in fp32 and stays 1 when summed in the dtype (each term
// is half an ulp of 1). Asked once per device and dtype. libtorch 1.13's bf16 CPU GEMM sums in
// bf16 on CPUs without AVX512 (its fallback kernel accumulates into the bf16 output); a GPU BLAS
// library that did so would fail the shadow check's and the canary's fp32 bounds on every run.
// fp32/fp64, and a dtype the device has no GEMM for: true.
bool gemm_sums_in_float32(c10::ScalarType dtype, const c10::Device& device);
// The unit roundoff of a GEMM's sums on `device`: accumulation_roundoff(dtype), or the dtype's
// own where the device sums in it.
double gemm_accumulation_roundoff(c10::ScalarType dtype, const c10::Device& device);

// The largest finite value of `dtype`: a row whose true result may exceed it may honestly
// overflow (an fp16 forward), which is the non-finite detectors' business.
double largest_finite(c10::ScalarType dtype);

// The least bound: an fp32 sum of squares underflows to 0 for a row of values below ~1e-19,
// whose honest error (~1e-15 at most) must not then count as infinitely many bounds; a zero row
// (a padded or fully dropped-out attention row) has a zero error and a zero bound. `dtype`: the
// inputs' (GEMM) or the output's (LayerNorm).
double bound_floor(c10::ScalarType dtype);

// Row i of C = A B (+ bias), output in `dtype`, reduction length K.
struct GemmBound {
  double u = 0;       // the output's unit roundoff
  double u_acc = 0;   // the accumulation's
  double sqrt_k = 0;  // sqrt(K)
  // 8 (u ||c_i|| + u_acc sqrt(K) ||a_i|| ||B||_F)
  double row(double c_norm, double a_norm, double b_frobenius) const {
    return kShadowBoundFactor * (u * c_norm + u_acc * sqrt_k * a_norm * b_frobenius);
  }
  // The same as the two coefficients of a tensor expression: of ||c_i||, and of ||a_i|| ||B||_F.
  double per_output_norm() const { return u * kShadowBoundFactor; }
  double per_input_norms() const { return u_acc * sqrt_k * kShadowBoundFactor; }
};
// u_acc: the roundoff of the GEMM's sums, gemm_accumulation_roundoff(dtype, device).
GemmBound gemm_bound(c10::ScalarType dtype, int64_t k, double u_acc);

// One element of LayerNorm over D values, output in `dtype`.
struct LayerNormBound {
  double u = 0;    // the output's unit roundoff
  double acc = 0;  // u_acc sqrt(D): the mean's and the variance's sums
  // 8 (u (|r| + |bias|) + u_acc sqrt(D) |w| m^2 (1 + |x_hat|)); m2 = m_i^2.
  double element(double reference, double bias, double weight, double m2, double x_hat) const {
    return kShadowBoundFactor *
           ((std::abs(reference) + std::abs(bias)) * u + std::abs(weight) * m2 * (std::abs(x_hat) + 1) * acc);
  }
};
LayerNormBound layer_norm_bound(c10::ScalarType dtype, int64_t d);

}  // namespace rcl
