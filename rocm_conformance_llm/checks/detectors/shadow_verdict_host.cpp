// The shadow verdict's host pass: the same verdict as shadow_verdict.cpp's ATen ops, over CPU
// tensors in one pass of plain loops (float64 sums), so a CPU run issues no ATen op for it.
#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <ATen/Dispatch.h>

#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_host_pass.hpp"

namespace rcl {

namespace {

// Rows are summed per block, not per row: attention's matmuls have rows of 16 on smoke, where a
// call per row costs more than its arithmetic.

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

// Contiguous float and double rows are also built for x86-64-v3 (RCL_X86_64_V3_CLONE).
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

}  // namespace rcl
