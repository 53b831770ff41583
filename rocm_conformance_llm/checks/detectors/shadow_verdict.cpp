// The shadow verdict by ATen ops on the op's device (and the dispatch to the host pass on the
// CPU, shadow_verdict_host.cpp), with the checksum check's ATen counterpart.
#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"

#include <array>
#include <vector>

#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

namespace {

// A fixed +-1 vector (bit 40 of a 64-bit multiplicative hash of the index) in `dtype`: independent
// of the data, and no RNG stream is touched, so training draws the same numbers with the check
// on. Kept per (length, dtype, device): on a GPU every op the check issues is a kernel launch
// from the host, which is what the check's cost is made of on a small model.
torch::Tensor signs(int64_t n, torch::ScalarType dtype, const torch::Device& device) {
  thread_local std::vector<torch::Tensor> made;
  for (const auto& t : made)
    if (t.numel() == n && t.scalar_type() == dtype && t.device() == device) return t;
  const auto idx = torch::arange(n, torch::TensorOptions().dtype(torch::kLong).device(device));
  const auto bit = idx.mul(static_cast<int64_t>(0x9E3779B97F4A7C15ULL)).bitwise_right_shift(40).bitwise_and(1);
  made.push_back(bit.mul(-2).add(1).to(dtype));
  return made.back();
}

// Norms for the bound (it needs ~1% accuracy, not 16 digits): fp32 sums, or fp64 for fp64 data,
// returned in fp64.
torch::Tensor norms(const torch::Tensor& t, int64_t dim) {
  const auto acc = t.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  return at::linalg_vector_norm(t, 2, {dim}, /*keepdim=*/true, acc).to(torch::kDouble);
}

torch::Tensor all_finite(const std::vector<torch::Tensor>& inputs) {
  torch::Tensor finite;
  for (const auto& t : inputs)
    if (t.defined()) finite = finite.defined() ? finite.logical_and(t.isfinite().all()) : t.isfinite().all();
  return finite;
}

// [worst error/bound, relative error, 1 if every element was judged]. Elements are judged where
// `judged` (finite inputs whose true result the dtype can represent); a NaN error makes worst NaN.
torch::Tensor verdict(const torch::Tensor& diff, const torch::Tensor& bound, const torch::Tensor& reference,
                      const torch::Tensor& judged, torch::ScalarType dtype) {
  const auto worst = at::where(judged, diff.div(bound.clamp_min(bound_floor(dtype))), 0.0).max();
  const auto relative = diff.norm().div(reference.norm().clamp_min(1e-300));
  return torch::stack({worst, relative, judged.all().to(torch::kDouble)});
}

// Each row's projected error, its bound, reference and whether it is judged, float64 [.., M, 1].
struct RowChecks {
  torch::Tensor diff, bound, reference, judged;
};

// C = A B (+ bias): see the bound in shadow_bound.hpp. `bias` is added along C's rows (a linear's,
// [N]); or, `bias_per_row`, bias[i] is added to every element of row i (a linear's bias as the
// transposed product Cᵀ = Bᵀ Aᵀ sees it). The projection C x of a bf16 or fp16 output is summed in
// fp32, not copied to fp64 first: flipping signs is exact, and an fp32 tree sum of N terms errs by
// ~log2(N) 2^-24 sqrt(N) ||c_i||, below 1% of the bound's first term 8 u ||c_i|| for N up to
// 10^6; fp32 and fp64 outputs are projected in fp64.
RowChecks row_checks(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias, bool bias_per_row,
                     const torch::Tensor& c, torch::ScalarType dtype) {
  const auto device = c.device();
  const int64_t n = c.size(-1);
  const auto x = signs(n, torch::kDouble, device).unsqueeze(-1);
  const auto projected =
      reduced_precision(c.scalar_type())
          ? c.mul(signs(n, c.scalar_type(), device)).sum(-1, /*keepdim=*/true, torch::kFloat).to(torch::kDouble)
          : torch::matmul(c.to(torch::kDouble), x);
  auto reference = torch::matmul(a.to(torch::kDouble), torch::matmul(b.to(torch::kDouble), x));
  if (bias.defined())
    reference = reference + (bias_per_row ? bias.to(torch::kDouble).unsqueeze(-1).mul(x.sum())
                                          : torch::matmul(bias.to(torch::kDouble), x));
  const GemmBound row_bound = gemm_bound(dtype, a.size(-1), gemm_accumulation_roundoff(dtype, device));
  const auto b_cols = norms(b, -2);  // [.., 1, N]
  const auto b_fro = b_cols.norm(2, {-2, -1}, /*keepdim=*/true);
  const auto a_rows = norms(a, -1);
  const auto bound = norms(c, -1).mul(row_bound.per_output_norm()).add(a_rows.mul(b_fro), row_bound.per_input_norms());
  // A row whose true result may exceed the dtype's range (|c_ij| <= ||a_i|| ||b_j||) may honestly
  // overflow (fp16 forward): that is a range effect for the non-finite detectors, not a wrong GEMM.
  auto judged = a_rows.mul(b_cols.amax(-1, true)).le(largest_finite(dtype));  // false for NaN/Inf inputs too
  if (bias.defined()) judged = judged.logical_and(bias.isfinite().all());
  return {(projected - reference).abs(), bound, reference, judged};
}

torch::Tensor gemm_verdict(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                           const torch::Tensor& c, torch::ScalarType dtype) {
  const auto rows = row_checks(a, b, bias, /*bias_per_row=*/false, c, dtype);
  return verdict(rows.diff, rows.bound, rows.reference, rows.judged, a.scalar_type());
}

// [worst error/bound, the row it is in, 1 if every row was judged] of a 2-D product.
std::array<torch::Tensor, 3> worst_row(const RowChecks& rows, torch::ScalarType input_dtype) {
  const auto ratio = at::where(rows.judged, rows.diff.div(rows.bound.clamp_min(bound_floor(input_dtype))), 0.0)
                         .reshape({-1});
  const auto at = ratio.argmax();  // a NaN counts as the largest
  return {ratio.index({at}), at.to(torch::kDouble), rows.judged.all().to(torch::kDouble)};
}

// LayerNorm over the weight's shape, per element (bound in shadow_bound.hpp).
torch::Tensor layer_norm_verdict(const TappedOp& op, const torch::Tensor& y) {
  const auto& weight = op.inputs[1];
  const int64_t d = weight.numel();
  const auto X = op.inputs[0].to(torch::kDouble).reshape({-1, d});
  const auto W = weight.to(torch::kDouble).reshape({d});
  const auto bias = op.inputs[2].defined() ? op.inputs[2].to(torch::kDouble).reshape({d}) : torch::zeros_like(W);
  const auto mean = X.mean(-1, true);
  const auto var = (X - mean).square().mean(-1, true) + op.eps;
  const auto x_hat = (X - mean) / var.sqrt();
  const auto reference = x_hat * W + bias;
  const auto m2 = X.square().mean(-1, true) / var;  // (rms(x) / sqrt(var + eps))^2 >= ~1
  const auto dtype = y.scalar_type();
  const LayerNormBound element_bound = layer_norm_bound(dtype, d);
  const auto bound =
      ((reference.abs() + bias.abs()) * element_bound.u + W.abs() * m2 * (x_hat.abs() + 1) * element_bound.acc) *
      kShadowBoundFactor;
  const auto diff = (y.to(torch::kDouble).reshape({-1, d}) - reference).abs();
  return verdict(diff, bound, reference, all_finite(op.inputs), dtype);
}

}  // namespace

torch::Tensor gemm_checksums_aten(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                                  const torch::Tensor& c) {
  torch::NoGradGuard no_grad;
  AutocastGuard no_autocast(c.device().type(), AutocastState{.enabled = false});
  const auto dtype = c.scalar_type();
  const auto rows = worst_row(row_checks(a, b, bias, /*bias_per_row=*/false, c, dtype), a.scalar_type());
  const auto columns = worst_row(row_checks(b.t(), a.t(), bias, /*bias_per_row=*/true, c.t(), dtype), a.scalar_type());
  return torch::stack({rows[0], rows[1], columns[0], columns[1], rows[2].mul(columns[2])});
}

bool reduced_precision(torch::ScalarType dtype) { return dtype == torch::kBFloat16 || dtype == torch::kHalf; }

bool shadow_mismatch(double worst_error_over_bound) { return !(worst_error_over_bound <= 1.0); }

torch::Tensor shadow_verdict_aten(const TappedOp& op, const torch::Tensor& output) {
  torch::NoGradGuard no_grad;
  AutocastGuard no_autocast(op.inputs[0].device().type(), AutocastState{.enabled = false});
  const auto& y = output.defined() ? output : op.output;
  switch (op.kind) {
    case TappedOp::Kind::linear: return gemm_verdict(op.inputs[0], op.inputs[1].t(), op.inputs[2], y, y.scalar_type());
    case TappedOp::Kind::matmul: return gemm_verdict(op.inputs[0], op.inputs[1], {}, y, y.scalar_type());
    case TappedOp::Kind::layer_norm: return layer_norm_verdict(op, y);
  }
  return {};
}

torch::Tensor shadow_verdict(const TappedOp& op, const torch::Tensor& output) {
  const auto& y = output.defined() ? output : op.output;
  if (!y.is_cpu()) return shadow_verdict_aten(op, output);
  const auto v = host_verdict(op, output);
  return torch::tensor({v[0], v[1], v[2]}, torch::kDouble);
}

}  // namespace rcl
