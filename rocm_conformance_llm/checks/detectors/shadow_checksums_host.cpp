// The checksum check's host pass (host_gemm_checksums): a 2-D GEMM's row and column verdicts
// over CPU tensors, one pass of plain loops per operand; apart from the op verdict's host pass,
// whose loops walk rows only.
#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_host_pass.hpp"

namespace rcl {

namespace {

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

// Contiguous float lines are also built for x86-64-v3 (RCL_X86_64_V3_CLONE).
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

// The lines in blocks of a fixed count on libtorch's threads (on one thread a checksum step held
// the training thread for tens of milliseconds while the others waited): each block's position
// sums go to a buffer of its own, added in block order, so the sums do not depend on the thread
// count. `sums(first_line, lines, position_dot, position_square)` runs one block.
template <typename BlockSums>
void over_line_blocks(int64_t lines, int64_t n, double* position_dot, double* position_square, const BlockSums& sums) {
  constexpr int64_t kLinesPerBlock = 64;
  const int64_t blocks = (lines + kLinesPerBlock - 1) / kLinesPerBlock;
  std::vector<double> dots(position_dot ? blocks * n : 0, 0.0), squares(position_square ? blocks * n : 0, 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      sums(b * kLinesPerBlock, std::min(kLinesPerBlock, lines - b * kLinesPerBlock),
           position_dot ? dots.data() + b * n : nullptr, position_square ? squares.data() + b * n : nullptr);
  });
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t e = 0; e < n; ++e) {
      if (position_dot) position_dot[e] += dots[b * n + e];
      if (position_square) position_square[e] += squares[b * n + e];
    }
}

template <typename T>
void operand_sums(const torch::Tensor& m, const OperandSums& s) {
  // The lines run along the contiguous dimension: a column-major matrix's lines are its columns.
  const bool by_columns = m.stride(0) == 1 && m.stride(1) != 1;
  const int d = by_columns ? 1 : 0;
  const int64_t lines = m.size(d), n = m.size(1 - d), line_step = m.stride(d), step = m.stride(1 - d);
  const double* along = by_columns ? s.y : s.x;   // weights along a line
  const double* across = by_columns ? s.x : s.y;  // weights across the lines
  double* line_dot = by_columns ? s.columns_dot : s.rows_dot;
  double* line_square = by_columns ? s.columns_square : s.rows_square;
  double* position_dot = by_columns ? s.rows_dot : s.columns_dot;
  double* position_square = by_columns ? s.rows_square : s.columns_square;
  const auto from = [](auto* sums, int64_t line) { return sums ? sums + line : nullptr; };
  const auto block_sums = [&](int64_t first, int64_t count, double* dot, double* square) {
    const T* p = m.data_ptr<T>() + first * line_step;
    if (step == 1)
      unit_operand_sums<T>(p, count, line_step, n, along, from(line_dot, first), from(line_square, first),
                           from(across, first), dot, square);
    else
      operand_sums_along<T, false>(p, count, line_step, n, step, along, from(line_dot, first), from(line_square, first),
                                   from(across, first), dot, square);
  };
  over_line_blocks(lines, n, position_dot, position_square, block_sums);
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

}  // namespace

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

}  // namespace rcl
