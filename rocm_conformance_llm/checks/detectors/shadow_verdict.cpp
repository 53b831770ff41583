#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/Dispatch.h>

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

// The same vector's element j, for the host pass.
double sign_of(int64_t j) { return ((static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ULL) >> 40) & 1 ? -1.0 : 1.0; }

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

// --- the host pass: the same verdicts over CPU tensors in plain loops ---
// (Per block of rows, not per row: attention's matmuls have rows of 16 on smoke, where a call
// per row costs more than its arithmetic.)

// Where each batch of `t` starts, t viewed as [batch..., rows, cols] with its first
// `own_batch_dims` dims aligned to the right of `batch` and broadcast where missing or of size 1
// (stride 0), as matmul broadcasts.
std::vector<int64_t> batch_origins(const torch::Tensor& t, int64_t own_batch_dims, c10::IntArrayRef batch) {
  std::vector<int64_t> strides(batch.size(), 0);
  for (int64_t d = 0; d < own_batch_dims; ++d) {
    const int64_t aligned = int64_t(batch.size()) - own_batch_dims + d;
    if (t.size(d) != 1) strides[aligned] = t.stride(d);
  }
  int64_t batches = 1;
  for (const auto n : batch) batches *= n;
  std::vector<int64_t> out;
  out.reserve(batches);
  std::vector<int64_t> index(batch.size(), 0);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t offset = 0;
    for (size_t d = 0; d < batch.size(); ++d) offset += index[d] * strides[d];
    out.push_back(offset);
    for (int64_t d = int64_t(batch.size()) - 1; d >= 0 && ++index[d] == batch[d]; --d) index[d] = 0;
  }
  return out;
}

// For each of `rows` rows (row i at p + i row_stride, elements col_stride apart):
// dot[i] = sum_j row_j w_j and square[i] = sum_j row_j^2, in float64, four partial sums per row
// to keep the adds in flight.
template <typename T, bool kUnitStride>
[[gnu::always_inline]] inline void strided_row_sums(const T* p, int64_t rows, int64_t row_stride, int64_t col_stride,
                                                    const double* w, int64_t n, double* dot, double* square) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = p + i * row_stride;
    const auto at = [&](int64_t j) { return static_cast<double>(row[kUnitStride ? j : j * col_stride]); };
    double d[4] = {0, 0, 0, 0}, s[4] = {0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
      for (int u = 0; u < 4; ++u) {
        const double v = at(j + u);
        d[u] += v * w[j + u];
        s[u] += v * v;
      }
    for (; j < n; ++j) {
      const double v = at(j);
      d[0] += v * w[j];
      s[0] += v * v;
    }
    dot[i] = (d[0] + d[1]) + (d[2] + d[3]);
    square[i] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}

// Contiguous float and double rows (fp32 training: nearly all the work) are also built for
// x86-64-v3 (AVX2, FMA), picked at load time where the CPU has it: 1.4x on this host's EPYC.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RCL_X86_64_V3_CLONE __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RCL_X86_64_V3_CLONE
#endif
RCL_X86_64_V3_CLONE void contiguous_row_sums(const float* p, int64_t rows, int64_t row_stride, const double* w,
                                             int64_t n, double* dot, double* square) {
  strided_row_sums<float, true>(p, rows, row_stride, 1, w, n, dot, square);
}
RCL_X86_64_V3_CLONE void contiguous_row_sums(const double* p, int64_t rows, int64_t row_stride, const double* w,
                                             int64_t n, double* dot, double* square) {
  strided_row_sums<double, true>(p, rows, row_stride, 1, w, n, dot, square);
}

template <typename T>
void row_sums(const T* p, int64_t rows, int64_t row_stride, int64_t col_stride, const double* w, int64_t n, double* dot,
              double* square) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    if (col_stride == 1) return contiguous_row_sums(p, rows, row_stride, w, n, dot, square);
  if (col_stride == 1) return strided_row_sums<T, true>(p, rows, row_stride, 1, w, n, dot, square);
  strided_row_sums<T, false>(p, rows, row_stride, col_stride, w, n, dot, square);
}

// Folds one judged error into the worst ratio so far (a NaN error makes it NaN, and it stays);
// divides only when the ratio may exceed it. Returns whether it became the worst.
bool fold_worst(double& worst, double diff, double bound) {
  if (diff <= worst * bound || std::isnan(worst)) return false;
  worst = diff / bound;
  return true;
}

// gemm_verdict in one pass: c = a b (+ bias), a [.., M, K], b [.., K, N] (any strides), c [.., M, N].
template <typename T>
std::array<double, 3> host_gemm_verdict(const torch::Tensor& a, int64_t a_rs, int64_t a_cs, const torch::Tensor& b,
                                        int64_t b_rs, int64_t b_cs, const torch::Tensor& bias, const torch::Tensor& c,
                                        torch::ScalarType dtype) {
  const int64_t m = c.size(-2), n = c.size(-1), k = a.size(-1);
  const auto batch = c.sizes().slice(0, c.dim() - 2);
  const auto a_origins = batch_origins(a, a.dim() - 2, batch), b_origins = batch_origins(b, b.dim() - 2, batch);
  const auto c_origins = batch_origins(c, c.dim() - 2, batch);
  const T *pa = a.data_ptr<T>(), *pb = b.data_ptr<T>(), *pc = c.data_ptr<T>();
  std::vector<double> x(n), bx(k), unused(k), column(n), ax(m), a2(m), cx(m), c2(m);
  for (int64_t j = 0; j < n; ++j) x[j] = sign_of(j);
  double bias_x = 0.0;
  bool bias_finite = true;
  if (bias.defined()) {
    const T* pbias = bias.data_ptr<T>();
    for (int64_t j = 0; j < n; ++j) {
      const double v = static_cast<double>(pbias[j * bias.stride(0)]);
      bias_x += v * x[j];
      bias_finite = bias_finite && std::isfinite(v);
    }
  }
  const GemmBound row_bound = gemm_bound(dtype, k, gemm_accumulation_roundoff(dtype, c.device()));
  const double largest = largest_finite(dtype), floor = bound_floor(a.scalar_type());
  double worst = 0.0, diff2 = 0.0, ref2 = 0.0;
  bool all_judged = true;
  double b_fro = 0.0, b_widest = 0.0;
  int64_t b_origin = -1;
  for (size_t batch_index = 0; batch_index < c_origins.size(); ++batch_index) {
    if (b_origins[batch_index] != b_origin) {  // b x and b's column norms: once per distinct b
      b_origin = b_origins[batch_index];
      const T* pbb = pb + b_origin;
      row_sums(pbb, k, b_rs, b_cs, x.data(), n, bx.data(), unused.data());
      std::fill(column.begin(), column.end(), 0.0);
      for (int64_t r = 0; r < k; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const double v = static_cast<double>(pbb[r * b_rs + j * b_cs]);
          column[j] += v * v;
        }
      double fro2 = 0.0, widest2 = 0.0;
      bool nan = false;
      for (const double v : column) {
        fro2 += v;
        nan = nan || std::isnan(v);
        widest2 = std::max(widest2, v);
      }
      b_fro = std::sqrt(fro2);
      b_widest = nan ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(widest2);
    }
    row_sums(pa + a_origins[batch_index], m, a_rs, a_cs, bx.data(), k, ax.data(), a2.data());
    row_sums(pc + c_origins[batch_index], m, c.stride(-2), c.stride(-1), x.data(), n, cx.data(), c2.data());
    for (int64_t i = 0; i < m; ++i) {
      const double reference = ax[i] + bias_x, a_norm = std::sqrt(a2[i]);
      const double diff = std::abs(cx[i] - reference);
      const double bound = row_bound.row(std::sqrt(c2[i]), a_norm, b_fro);
      const bool judged = a_norm * b_widest <= largest && bias_finite;
      if (judged) fold_worst(worst, diff, std::max(bound, floor));
      all_judged = all_judged && judged;
      diff2 += diff * diff;
      ref2 += reference * reference;
    }
  }
  return {worst, std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-300), all_judged ? 1.0 : 0.0};
}

// --- the checksum check's host pass: rows and columns of a 2-D product, one pass per operand ---

// Along each line of a matrix (a run of `n` elements, `step` apart; `lines` of them, `line_step`
// apart), in float64: line_dot[r] = sum_e t_re v_e and line_square[r] = sum_e t_re^2, and across
// the lines position_dot[e] += w_r t_re and position_square[e] += t_re^2. Which sums are wanted is
// a template argument: the loop keeps no branch.
template <typename T, bool kUnit, bool kLineDot, bool kLineSquare, bool kPositionDot, bool kPositionSquare>
[[gnu::always_inline]] inline void line_sums(const T* p, int64_t lines, int64_t line_step, int64_t n, int64_t step, const double* v, double* line_dot,
               double* line_square, const double* w, double* position_dot, double* position_square) {
  for (int64_t r = 0; r < lines; ++r) {
    const T* line = p + r * line_step;
    const double wr = kPositionDot ? w[r] : 0.0;
    double dot[4] = {0, 0, 0, 0}, square[4] = {0, 0, 0, 0};
    const auto visit = [&](int64_t e, int lane) {
      const double t = static_cast<double>(line[kUnit ? e : e * step]);
      if constexpr (kLineDot) dot[lane] += t * v[e];
      if constexpr (kLineSquare) square[lane] += t * t;
      if constexpr (kPositionDot) position_dot[e] += wr * t;
      if constexpr (kPositionSquare) position_square[e] += t * t;
    };
    int64_t e = 0;
    for (; e + 4 <= n; e += 4)
      for (int lane = 0; lane < 4; ++lane) visit(e + lane, lane);
    for (; e < n; ++e) visit(e, 0);
    if constexpr (kLineDot) line_dot[r] = (dot[0] + dot[1]) + (dot[2] + dot[3]);
    if constexpr (kLineSquare) line_square[r] = (square[0] + square[1]) + (square[2] + square[3]);
  }
}

// The sums a GEMM operand gives, read once along whichever of its dimensions is contiguous (a
// linear's weight enters as Wᵀ, dW's first operand as dYᵀ): rows_dot = m x, rows_square =
// |rows|^2, columns_dot = mᵀ y, columns_square = |columns|^2; a null output is not computed,
// columns_* are accumulated into (zeroed by the caller).
struct OperandSums {
  const double *x = nullptr, *y = nullptr;
  double *rows_dot = nullptr, *rows_square = nullptr, *columns_dot = nullptr, *columns_square = nullptr;
};

template <typename T, bool kUnit>
[[gnu::always_inline]] inline void operand_sums_along(const T* p, int64_t lines, int64_t line_step, int64_t n, int64_t step, const double* v,
                        double* line_dot, double* line_square, const double* w, double* position_dot,
                        double* position_square) {
  // The four wanted-or-not sums as one of 16 instantiations.
  const int wanted = (line_dot ? 8 : 0) | (line_square ? 4 : 0) | (position_dot ? 2 : 0) | (position_square ? 1 : 0);
  [&]<int... kWanted>(std::integer_sequence<int, kWanted...>) {
    ((wanted == kWanted ? line_sums<T, kUnit, bool(kWanted & 8), bool(kWanted & 4), bool(kWanted & 2), bool(kWanted & 1)>(
                              p, lines, line_step, n, step, v, line_dot, line_square, w, position_dot, position_square)
                        : void()),
     ...);
  }(std::make_integer_sequence<int, 16>{});
}

// Contiguous float lines (fp32 training: nearly all the work) built for x86-64-v3 too, as above.
RCL_X86_64_V3_CLONE void contiguous_operand_sums(const float* p, int64_t lines, int64_t line_step, int64_t n,
                                                 const double* v, double* line_dot, double* line_square,
                                                 const double* w, double* position_dot, double* position_square) {
  operand_sums_along<float, true>(p, lines, line_step, n, 1, v, line_dot, line_square, w, position_dot,
                                  position_square);
}

template <typename T>
void unit_operand_sums(const T* p, int64_t lines, int64_t line_step, int64_t n, const double* v, double* line_dot,
                       double* line_square, const double* w, double* position_dot, double* position_square) {
  if constexpr (std::is_same_v<T, float>)
    contiguous_operand_sums(p, lines, line_step, n, v, line_dot, line_square, w, position_dot, position_square);
  else
    operand_sums_along<T, true>(p, lines, line_step, n, 1, v, line_dot, line_square, w, position_dot,
                                position_square);
}

template <typename T>
void operand_sums(const torch::Tensor& m, const OperandSums& s) {
  const T* p = m.data_ptr<T>();
  const int64_t rows = m.size(0), columns = m.size(1);
  if (m.stride(0) == 1 && m.stride(1) != 1) {  // column-major: the lines are its columns
    unit_operand_sums<T>(p, columns, m.stride(1), rows, s.y, s.columns_dot, s.columns_square, s.x, s.rows_dot,
                         s.rows_square);
    return;
  }
  if (m.stride(1) == 1)
    unit_operand_sums<T>(p, rows, m.stride(0), columns, s.x, s.rows_dot, s.rows_square, s.y, s.columns_dot,
                         s.columns_square);
  else
    operand_sums_along<T, false>(p, rows, m.stride(0), columns, m.stride(1), s.x, s.rows_dot, s.rows_square, s.y,
                                 s.columns_dot, s.columns_square);
}

// One side of the verdict (C's rows, or its columns as Cᵀ = Bᵀ Aᵀ's rows): line i's projection
// `projected[i]` against `reference[i]`, bound by its own output norm and input norm against the
// other operand's Frobenius norm, judged where its true result is representable. [worst, its line,
// all judged].
std::array<double, 3> worst_line(const std::vector<double>& projected, const std::vector<double>& reference,
                                 const std::vector<double>& output_square, const std::vector<double>& input_square,
                                 const std::vector<double>& other_input_square, bool bias_finite,
                                 const GemmBound& bound, double largest, double floor) {
  double other_fro2 = 0.0, other_widest2 = 0.0;
  bool other_nan = false;
  for (const double v : other_input_square) {
    other_fro2 += v;
    other_widest2 = std::max(other_widest2, v);
    other_nan = other_nan || std::isnan(v);
  }
  const double other_fro = std::sqrt(other_fro2);
  const double other_widest = other_nan ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(other_widest2);
  double worst = 0.0;
  int64_t worst_index = 0;
  bool all_judged = true;
  for (size_t i = 0; i < projected.size(); ++i) {
    const double input_norm = std::sqrt(input_square[i]);
    const bool judged = input_norm * other_widest <= largest && bias_finite;
    all_judged = all_judged && judged;
    if (judged && fold_worst(worst, std::abs(projected[i] - reference[i]),
                             std::max(bound.row(std::sqrt(output_square[i]), input_norm, other_fro), floor)))
      worst_index = int64_t(i);
  }
  return {worst, double(worst_index), all_judged ? 1.0 : 0.0};
}

// gemm_checksums in four passes: B (B x and its column norms), A (A (B x), its row norms and yᵀ A),
// B again ((yᵀ A) B), C (C x, yᵀ C and its row and column norms).
template <typename T>
std::array<double, 5> fused_gemm_checksums(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                                           const torch::Tensor& c) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> x(n), y(m);
  for (int64_t j = 0; j < n; ++j) x[j] = sign_of(j);
  for (int64_t i = 0; i < m; ++i) y[i] = sign_of(i);
  std::vector<double> bx(k), b_columns2(n, 0.0), ax(m), a_rows2(m), ya(k, 0.0), yab(n, 0.0);
  std::vector<double> cx(m), c_rows2(m), yc(n, 0.0), c_columns2(n, 0.0);
  operand_sums<T>(b, {.x = x.data(), .rows_dot = bx.data(), .columns_square = b_columns2.data()});
  operand_sums<T>(a, {.x = bx.data(), .y = y.data(), .rows_dot = ax.data(), .rows_square = a_rows2.data(),
                      .columns_dot = ya.data()});
  operand_sums<T>(b, {.y = ya.data(), .columns_dot = yab.data()});
  operand_sums<T>(c, {.x = x.data(), .y = y.data(), .rows_dot = cx.data(), .rows_square = c_rows2.data(),
                      .columns_dot = yc.data(), .columns_square = c_columns2.data()});
  // The bias: bias . x on every row; bias[j] sum(y) on column j.
  double bias_x = 0.0, y_sum = 0.0;
  for (const double v : y) y_sum += v;
  bool bias_finite = true;
  if (bias.defined()) {
    const T* pbias = bias.data_ptr<T>();
    for (int64_t j = 0; j < n; ++j) {
      const double v = static_cast<double>(pbias[j * bias.stride(0)]);
      bias_x += v * x[j];
      yab[j] += v * y_sum;
      bias_finite = bias_finite && std::isfinite(v);
    }
  }
  for (auto& v : ax) v += bias_x;
  const auto dtype = c.scalar_type();
  const GemmBound bound = gemm_bound(dtype, k, gemm_accumulation_roundoff(dtype, c.device()));
  const double largest = largest_finite(dtype), floor = bound_floor(a.scalar_type());
  const auto rows = worst_line(cx, ax, c_rows2, a_rows2, b_columns2, bias_finite, bound, largest, floor);
  const auto columns = worst_line(yc, yab, c_columns2, b_columns2, a_rows2, bias_finite, bound, largest, floor);
  return {rows[0], rows[1], columns[0], columns[1], rows[2] * columns[2]};
}

// layer_norm_verdict, row by row; kUnitStride: x, y, weight and bias contiguous along the row.
// The row's variance is E[x²] - mean² in float64: it loses m_i² 2^-53 relative, far inside the
// bound's m_i² u_acc term. Four lanes of sums per row keep the adds in flight.
template <typename T, bool kUnitStride>
std::array<double, 3> host_layer_norm_rows(const TappedOp& op, const torch::Tensor& y) {
  const auto &x = op.inputs[0], &weight = op.inputs[1], &bias = op.inputs[2];
  const int64_t d = weight.numel();
  const auto leading = x.sizes().slice(0, x.dim() - 1);
  const auto x_rows = batch_origins(x, x.dim() - 1, leading), y_rows = batch_origins(y, y.dim() - 1, leading);
  const T *px = x.data_ptr<T>(), *py = y.data_ptr<T>(), *pw = weight.data_ptr<T>();
  const T* pbias = bias.defined() ? bias.data_ptr<T>() : nullptr;
  const int64_t xs = x.stride(-1), ys = y.stride(-1), ws = weight.stride(0), bs = bias.defined() ? bias.stride(0) : 0;
  const auto at = [](const T* p, int64_t s, int64_t j) { return static_cast<double>(p[kUnitStride ? j : j * s]); };
  const auto dtype = y.scalar_type();
  const LayerNormBound element_bound = layer_norm_bound(dtype, d);
  const double floor = bound_floor(dtype);
  std::vector<double> w(d), b(d, 0.0), ones(d, 1.0);
  bool finite = true;
  for (int64_t j = 0; j < d; ++j) {
    w[j] = at(pw, ws, j);
    if (pbias) b[j] = at(pbias, bs, j);
    finite = finite && std::isfinite(w[j]) && std::isfinite(b[j]);
  }
  double worst[4] = {0, 0, 0, 0}, diff2[4] = {0, 0, 0, 0}, ref2[4] = {0, 0, 0, 0};
  for (size_t row = 0; row < x_rows.size(); ++row) {
    const T *xr = px + x_rows[row], *yr = py + y_rows[row];
    double sum = 0.0, sum2 = 0.0;
    row_sums(xr, 1, 0, xs, ones.data(), d, &sum, &sum2);
    finite = finite && std::isfinite(sum2);
    const double mean = sum / double(d), mean2 = sum2 / double(d);
    const double var = std::max(mean2 - mean * mean, 0.0) + op.eps, inv_sd = 1.0 / std::sqrt(var), m2 = mean2 / var;
    const auto judge = [&](int64_t j, double& worst_lane, double& diff2_lane, double& ref2_lane) {
      const double x_hat = (at(xr, xs, j) - mean) * inv_sd;
      const double reference = x_hat * w[j] + b[j];
      const double bound = element_bound.element(reference, b[j], w[j], m2, x_hat);
      const double diff = std::abs(at(yr, ys, j) - reference);
      fold_worst(worst_lane, diff, std::max(bound, floor));
      diff2_lane += diff * diff;
      ref2_lane += reference * reference;
    };
    int64_t j = 0;
    for (; j + 4 <= d; j += 4)
      for (int lane = 0; lane < 4; ++lane) judge(j + lane, worst[lane], diff2[lane], ref2[lane]);
    for (; j < d; ++j) judge(j, worst[0], diff2[0], ref2[0]);
  }
  double worst_all = 0.0;
  for (const double v : worst) fold_worst(worst_all, v, 1.0);
  // Non-finite inputs: nothing judged (the non-finite detectors' business).
  if (!finite) worst_all = 0.0;
  const double diff_norm = std::sqrt((diff2[0] + diff2[1]) + (diff2[2] + diff2[3]));
  const double ref_norm = std::sqrt((ref2[0] + ref2[1]) + (ref2[2] + ref2[3]));
  return {worst_all, diff_norm / std::max(ref_norm, 1e-300), finite ? 1.0 : 0.0};
}

template <typename T>
std::array<double, 3> host_layer_norm_verdict(const TappedOp& op, const torch::Tensor& y) {
  const auto &x = op.inputs[0], &weight = op.inputs[1], &bias = op.inputs[2];
  const bool unit =
      x.stride(-1) == 1 && y.stride(-1) == 1 && weight.stride(0) == 1 && (!bias.defined() || bias.stride(0) == 1);
  return unit ? host_layer_norm_rows<T, true>(op, y) : host_layer_norm_rows<T, false>(op, y);
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

std::array<double, 3> host_verdict(const TappedOp& op, const torch::Tensor& output) {
  const auto& y = output.defined() ? output : op.output;
  for (const auto& t : op.inputs)
    TORCH_CHECK(!t.defined() || (t.is_cpu() && t.scalar_type() == y.scalar_type()), "host_verdict: ", op.describe(),
                " is not one dtype on the CPU");
  TORCH_CHECK(y.is_cpu(), "host_verdict: output not on the CPU");
  std::array<double, 3> out{};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, y.scalar_type(), "host_verdict", [&] {
    const auto& a = op.inputs[0];
    switch (op.kind) {
      case TappedOp::Kind::linear: {  // b = Wᵀ: b(k, j) = W[j, k]
        const auto& w = op.inputs[1];
        out = host_gemm_verdict<scalar_t>(a, a.stride(-2), a.stride(-1), w, w.stride(1), w.stride(0), op.inputs[2], y,
                                          y.scalar_type());
        break;
      }
      case TappedOp::Kind::matmul: {
        const auto& b = op.inputs[1];
        out = host_gemm_verdict<scalar_t>(a, a.stride(-2), a.stride(-1), b, b.stride(-2), b.stride(-1), {}, y,
                                          y.scalar_type());
        break;
      }
      case TappedOp::Kind::layer_norm: out = host_layer_norm_verdict<scalar_t>(op, y); break;
    }
  });
  return out;
}

std::array<double, 5> host_gemm_checksums(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                                          const torch::Tensor& c) {
  for (const auto& t : {a, b, bias})
    TORCH_CHECK(!t.defined() || (t.is_cpu() && t.scalar_type() == c.scalar_type()),
                "host_gemm_checksums: operands not of one dtype on the CPU");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, "host_gemm_checksums: 2-D operands expected");
  std::array<double, 5> out{};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "host_gemm_checksums",
                                  [&] { out = fused_gemm_checksums<scalar_t>(a, b, bias, c); });
  return out;
}

torch::Tensor shadow_verdict(const TappedOp& op, const torch::Tensor& output) {
  const auto& y = output.defined() ? output : op.output;
  if (!y.is_cpu()) return shadow_verdict_aten(op, output);
  const auto v = host_verdict(op, output);
  return torch::tensor({v[0], v[1], v[2]}, torch::kDouble);
}

}  // namespace rcl
