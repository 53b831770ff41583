#include "rocm_conformance_llm/checks/detectors/gemm_canary.hpp"

#include <algorithm>
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/faults/faults.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"
#include "rocm_conformance_llm/model.hpp"

namespace rcl {

namespace {
constexpr int64_t kMaxCanaryRows = 1024;
constexpr int64_t kMaxCanaryLmHeadColumns = 8192;

std::string precision_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return "fp32";
    case torch::kHalf: return "fp16";
    case torch::kBFloat16: return "bf16";
    case torch::kDouble: return "fp64";
    default: return c10::toString(dtype);
  }
}

torch::Tensor product(const CanaryShape& s, const torch::Tensor& a, const torch::Tensor& b) {
  return torch::mm(s.transpose_a ? a.t() : a, s.transpose_b ? b.t() : b);
}

void drop_last_row(torch::Tensor& out, const CanaryShape& s) { out.narrow(0, s.m - 1, 1).zero_(); }

nlohmann::json shape_json(const CanaryShape& s) {
  return {{"label", s.label},
          {"m", s.m},
          {"n", s.n},
          {"k", s.k},
          {"transpose_a", s.transpose_a},
          {"transpose_b", s.transpose_b},
          {"dtype", precision_name(s.dtype)}};
}
}  // namespace

double unit_roundoff(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kDouble: return std::ldexp(1.0, -53);
    case torch::kFloat: return std::ldexp(1.0, -24);
    case torch::kHalf: return std::ldexp(1.0, -11);
    case torch::kBFloat16: return std::ldexp(1.0, -8);
    default: throw std::invalid_argument("unit roundoff: unsupported dtype " + std::string(c10::toString(dtype)));
  }
}

std::string CanaryShape::to_string() const {
  return fmt::format("{} {}x{}x{} {}{} {}", label, m, n, k, transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N',
                     precision_name(dtype));
}

GemmTolerance gemm_tolerance(torch::ScalarType dtype, int64_t k) {
  const double u = unit_roundoff(dtype);
  const double u_acc = dtype == torch::kDouble ? u : unit_roundoff(torch::kFloat);
  const double sqrt_k = std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  return {8.0 * u + 32.0 * u_acc * sqrt_k, 16.0 * u + 64.0 * u_acc * sqrt_k};
}

torch::ScalarType precision_dtype(Precision mixed_precision) {
  switch (mixed_precision) {
    case Precision::fp32: return torch::kFloat;
    case Precision::bf16: return torch::kBFloat16;
    case Precision::fp16: return torch::kHalf;
  }
  return torch::kFloat;
}

std::vector<CanaryShape> model_gemm_shapes(const TrainingConfig& cfg) {
  const auto dtype = precision_dtype(cfg.mixed_precision);
  const int64_t tokens = std::min(cfg.batch_size * cfg.seq_len, kMaxCanaryRows);
  const int64_t h = cfg.hidden_size;
  const int64_t ffn = ffn_hidden_size(cfg);  // the model's own width (SwiGLU: 2/3, rounded to 8)
  // SwiGLU's up projection produces the gate and the value in one GEMM.
  const int64_t ffn_up_out = cfg.activation == Activation::swiglu ? 2 * ffn : ffn;
  std::vector<CanaryShape> shapes = {
      {"qkv_proj", tokens, qkv_output_width(cfg), h, false, true, dtype},
      {"attn_out_proj", tokens, h, h, false, true, dtype},
      {"ffn_up", tokens, ffn_up_out, h, false, true, dtype},
      {"ffn_down", tokens, h, ffn, false, true, dtype},
      // dW = dY^T X: both operands transposed views of activations, reduction over tokens.
      {"ffn_up_weight_grad", ffn_up_out, h, tokens, true, false, dtype},
  };
  if (cfg.vocab_size > 0)
    shapes.push_back({"lm_head", tokens, std::min(cfg.vocab_size, kMaxCanaryLmHeadColumns), h, false, true, dtype});
  return shapes;
}

std::vector<CanaryShape> known_issue_gemm_shapes() {
  return {{"rocm-libraries#9055", 546, 9728, 2560, true, false, torch::kBFloat16}};
}

GemmCanaryResult judge_gemm_output(const CanaryShape& shape, const torch::Tensor& output,
                                   const torch::Tensor& reference) {
  GemmCanaryResult r{.shape = shape, .tolerance = gemm_tolerance(shape.dtype, shape.k)};
  const auto got = output.detach().to(torch::kCPU, torch::kDouble);
  r.nonfinite_output = !got.isfinite().all().item<bool>();
  const double ref_norm = std::max(reference.norm().item<double>(), 1e-300);
  const double ref_rms = ref_norm / std::sqrt(static_cast<double>(std::max<int64_t>(reference.numel(), 1)));
  const auto diff = got - reference;
  r.relative_fro_error = diff.norm().item<double>() / ref_norm;
  r.max_elementwise_error = diff.abs().max().item<double>() / ref_rms;
  return r;
}

bool GemmCanaryResult::passed() const {
  return !supported || (!nonfinite_output && relative_fro_error <= tolerance.relative_fro &&
                        max_elementwise_error <= tolerance.max_elementwise);
}

GemmCanary::GemmCanary(std::vector<CanaryShape> shapes, const torch::Device& device, uint64_t seed) : device_(device) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  for (auto& shape : shapes) {
    // Round the float64 draws to the dtype first so the reference sees the same inputs.
    const auto a = torch::randn({shape.m, shape.k}, gen, f64).to(shape.dtype).to(torch::kDouble);
    const auto b = torch::randn({shape.k, shape.n}, gen, f64).to(shape.dtype).to(torch::kDouble);
    Case c;
    c.reference = torch::mm(a, b);
    const auto stored_a = shape.transpose_a ? a.t().contiguous() : a;
    const auto stored_b = shape.transpose_b ? b.t().contiguous() : b;
    c.a = stored_a.to(device_, shape.dtype);
    c.b = stored_b.to(device_, shape.dtype);
    c.shape = std::move(shape);
    cases_.push_back(std::move(c));
  }
}

bool GemmCanary::wrong_again(const Case& c, const torch::Device& device, torch::ScalarType dtype, bool corrupt) const {
  CanaryShape shape = c.shape;
  shape.dtype = dtype;
  auto out = product(shape, c.a.to(device, dtype), c.b.to(device, dtype));
  if (corrupt) drop_last_row(out, shape);
  return !judge_gemm_output(shape, out, c.reference).passed();
}

std::vector<GemmCanaryResult> GemmCanary::run(int64_t step, int rank, FindingLog& log, CanaryFault fault) {
  torch::NoGradGuard no_grad;
  std::vector<GemmCanaryResult> results;
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    torch::Tensor out;
    try {
      // A device that sums this dtype in the dtype itself cannot be held to the fp32-sum
      // tolerance, and a looser one would miss the dropped row this canary exists to catch.
      if (gemm_sums_in_float32(c.shape.dtype, device_)) out = product(c.shape, c.a, c.b);
    } catch (const c10::Error&) {
      // e.g. "addmm_impl_cpu_" not implemented for 'Half': nothing to validate on this device.
    }
    if (!out.defined()) {
      GemmCanaryResult unsupported;
      unsupported.shape = c.shape;
      unsupported.supported = false;
      results.push_back(std::move(unsupported));
      continue;
    }
    const bool injected = fault != CanaryFault::none && i == 0;
    if (injected) drop_last_row(out, c.shape);
    GemmCanaryResult r = judge_gemm_output(c.shape, out, c.reference);
    results.push_back(r);
    if (r.passed()) continue;

    const std::string signature = r.nonfinite_output ? "gemm_nonfinite_output" : "gemm_wrong_result";
    if (reported_.count({i, signature})) continue;
    // The same product again on the device; then in fp32 (a bf16/fp16 shape) and on the CPU (a
    // GPU's shape, fp16 as fp32 there: CPU fp16 GEMMs may not exist), as the shadow check does.
    const bool persistent = injected && fault == CanaryFault::persistent;
    RerunOutcome outcome{.reproducible = wrong_again(c, device_, c.shape.dtype, persistent)};
    if (outcome.reproducible) {
      const bool reduced = c.shape.dtype == torch::kBFloat16 || c.shape.dtype == torch::kHalf;
      outcome.also_in_fp32 = reduced ? wrong_again(c, device_, torch::kFloat, persistent) : true;
      if (!device_.is_cpu())
        outcome.also_on_cpu =
            wrong_again(c, torch::kCPU, c.shape.dtype == torch::kHalf ? torch::kFloat : c.shape.dtype, false);
      reported_.insert({i, signature});
    }
    Finding f{
        .component = component::rocblas,
        .signature = signature,
        .severity = Severity::fail,
        .step = step,
        .rank = rank,
        .message = r.nonfinite_output
                       ? fmt::format("GEMM {} on {}: finite inputs gave non-finite outputs", c.shape.to_string(),
                                     device_.str())
                       : fmt::format("GEMM {} on {}: relative error {:.3g} (tolerance {:.3g}), worst element {:.3g} "
                                     "rms (tolerance {:.3g})",
                                     c.shape.to_string(), device_.str(), r.relative_fro_error, r.tolerance.relative_fro,
                                     r.max_elementwise_error, r.tolerance.max_elementwise),
        .evidence = {{"shape", shape_json(c.shape)},
                     {"device", device_.str()},
                     {"relative_fro_error", json_number(r.relative_fro_error)},
                     {"max_elementwise_error_rms", json_number(r.max_elementwise_error)},
                     {"tolerance_relative_fro", r.tolerance.relative_fro},
                     {"tolerance_max_elementwise_rms", r.tolerance.max_elementwise},
                     {"nonfinite_output", r.nonfinite_output},
                     {"injected_fault", injected}}};
    transients_.apply(f, outcome);
    log.add(std::move(f));
  }
  return results;
}

namespace {
std::vector<CanaryShape> canary_shapes(const TrainingConfig& cfg, const torch::Device& device) {
  auto shapes = model_gemm_shapes(cfg);
  if (device.type() != torch::kCPU)
    for (auto& shape : known_issue_gemm_shapes()) shapes.push_back(std::move(shape));
  return shapes;
}
}  // namespace

GemmCanaryCheck::GemmCanaryCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop,
                                 const FaultPlan* faults)
    : Detector(cfg, log),
      loop_(loop),
      faults_(faults),
      canary_(canary_shapes(loop.ctx().cfg, loop.ctx().device), loop.ctx().device) {}

void GemmCanaryCheck::between_steps(int64_t step) {
  if (step % cfg_.gemm_canary_interval != 0) return;
  loop_.enter_phase(phase::canary, step);
  const int rank = loop_.rank();
  CanaryFault fault = CanaryFault::none;
  if (faults_ && faults_->fires(FaultKind::gemm_corrupt_once, step, rank)) fault = CanaryFault::once;
  if (faults_ && faults_->fires(FaultKind::gemm_corrupt, step, rank)) fault = CanaryFault::persistent;
  canary_.run(step, rank, log(), fault);
}

}  // namespace rcl
