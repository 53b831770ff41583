#include "rocm_conformance_llm/diagnostics/shadow_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rocm_conformance_llm/diagnostics/gemm_canary.hpp"
#include "rocm_conformance_llm/precision.hpp"
#include "rocm_conformance_llm/trainer.hpp"

namespace rcl {

namespace {

constexpr double kBoundFactor = 8.0;  // Hoeffding: P(|e . x| > 8 ||e||) < 2 exp(-32)

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

double accumulation_roundoff(torch::ScalarType dtype) {
  // PyTorch asks every GEMM for fp32 accumulation (TF32/xf32 off by default).
  return dtype == torch::kDouble ? unit_roundoff(dtype) : unit_roundoff(torch::kFloat);
}

bool reduced_precision(torch::ScalarType dtype) { return dtype == torch::kBFloat16 || dtype == torch::kHalf; }

// Norms for the bound (it needs ~1% accuracy, not 16 digits): fp32 sums, or fp64 for fp64 data,
// returned in fp64.
torch::Tensor norms(const torch::Tensor& t, int64_t dim) {
  const auto acc = t.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  return at::linalg_vector_norm(t, 2, {dim}, /*keepdim=*/true, acc).to(torch::kDouble);
}

// The least bound: an fp32 sum of squares underflows to 0 for a row of values below ~1e-19,
// whose honest error (~1e-15 at most) must not then count as infinitely many bounds; a zero row
// (a padded or fully dropped-out attention row) has a zero error and a zero bound.
double bound_floor(torch::ScalarType dtype) { return dtype == torch::kDouble ? 1e-300 : 1e-12; }

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

// C = A B (+ bias): see the bound at the top of shadow_check.hpp. The projection C x of a bf16 or
// fp16 output is summed in fp32, not copied to fp64 first: flipping signs is exact, and an fp32
// tree sum of N terms errs by ~log2(N) 2^-24 sqrt(N) ||c_i||, below 1% of the bound's first term
// 8 u ||c_i|| for N up to 10^6; fp32 and fp64 outputs are projected in fp64.
torch::Tensor gemm_verdict(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                           const torch::Tensor& c, torch::ScalarType dtype) {
  const auto device = c.device();
  const int64_t n = c.size(-1);
  const auto x = signs(n, torch::kDouble, device).unsqueeze(-1);
  const auto projected = reduced_precision(c.scalar_type())
                             ? c.mul(signs(n, c.scalar_type(), device)).sum(-1, /*keepdim=*/true, torch::kFloat).to(torch::kDouble)
                             : torch::matmul(c.to(torch::kDouble), x);
  auto reference = torch::matmul(a.to(torch::kDouble), torch::matmul(b.to(torch::kDouble), x));
  if (bias.defined()) reference = reference + torch::matmul(bias.to(torch::kDouble), x);
  const double sqrt_k = std::sqrt(static_cast<double>(a.size(-1)));
  const auto b_cols = norms(b, -2);  // [.., 1, N]
  const auto b_fro = b_cols.norm(2, {-2, -1}, /*keepdim=*/true);
  const auto a_rows = norms(a, -1);
  const auto bound = norms(c, -1).mul(unit_roundoff(dtype) * kBoundFactor)
                         .add(a_rows.mul(b_fro), accumulation_roundoff(dtype) * sqrt_k * kBoundFactor);
  // A row whose true result may exceed the dtype's range (|c_ij| <= ||a_i|| ||b_j||) may honestly
  // overflow (fp16 forward): that is a range effect for the non-finite detectors, not a wrong GEMM.
  const double largest = dtype == torch::kHalf       ? 65504.0
                         : dtype == torch::kBFloat16 ? 3.38e38
                         : dtype == torch::kFloat    ? 3.4e38
                                                     : std::numeric_limits<double>::max();
  auto judged = a_rows.mul(b_cols.amax(-1, true)).le(largest);  // false for NaN/Inf inputs too
  if (bias.defined()) judged = judged.logical_and(bias.isfinite().all());
  return verdict((projected - reference).abs(), bound, reference, judged, a.scalar_type());
}

// LayerNorm over the weight's shape, per element (bound at the top of shadow_check.hpp).
torch::Tensor layer_norm_verdict(const ShadowOp& op, const torch::Tensor& y) {
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
  const auto bound = ((reference.abs() + bias.abs()) * unit_roundoff(dtype) +
                      W.abs() * m2 * (x_hat.abs() + 1) * (accumulation_roundoff(dtype) * std::sqrt(double(d)))) *
                     kBoundFactor;
  const auto diff = (y.to(torch::kDouble).reshape({-1, d}) - reference).abs();
  return verdict(diff, bound, reference, all_finite(op.inputs), dtype);
}

const char* op_name(ShadowOp::Kind kind) {
  switch (kind) {
    case ShadowOp::Kind::linear: return "aten::linear";
    case ShadowOp::Kind::matmul: return "aten::matmul";
    case ShadowOp::Kind::layer_norm: return "aten::layer_norm";
  }
  return "?";
}

// --- capture: an ATen RecordFunction callback on the training thread ---

thread_local ShadowCheck* t_check = nullptr;  // armed: the forward of a checked step
thread_local bool t_busy = false;             // the check's own ops are not candidates
// Input dtypes of the candidate ops now open: an op inside another of the same dtype (the
// matmul inside a linear) is the same GEMM; one of another dtype (autocast's inner call) is not.
thread_local std::vector<torch::ScalarType> t_open;

struct Capture final : at::ObserverContext {
  torch::ScalarType dtype = torch::kFloat;  // the inputs' (fn.inputs() is valid only at the start)
  std::string key;
  ShadowOp op;
  bool wanted = false;
};

torch::Tensor optional_tensor(const c10::IValue& v) { return v.isTensor() ? v.toTensor() : torch::Tensor(); }

// The op's operands when it is a candidate: floating, one dtype, one device, matrices.
std::optional<ShadowOp> candidate(const at::RecordFunction& fn) {
  const char* name = fn.name();
  ShadowOp op;
  if (std::strcmp(name, "aten::linear") == 0) op.kind = ShadowOp::Kind::linear;
  else if (std::strcmp(name, "aten::matmul") == 0) op.kind = ShadowOp::Kind::matmul;
  else if (std::strcmp(name, "aten::layer_norm") == 0) op.kind = ShadowOp::Kind::layer_norm;
  else return std::nullopt;
  const auto args = fn.inputs();
  const size_t wanted = op.kind == ShadowOp::Kind::matmul ? 2 : op.kind == ShadowOp::Kind::linear ? 3 : 5;
  if (args.size() < wanted || !args[0].isTensor() || (op.kind != ShadowOp::Kind::layer_norm && !args[1].isTensor()))
    return std::nullopt;
  if (op.kind == ShadowOp::Kind::layer_norm) {
    op.inputs = {args[0].toTensor(), optional_tensor(args[2]), optional_tensor(args[3])};
    if (!op.inputs[1].defined() || !args[4].isDouble()) return std::nullopt;
    op.eps = args[4].toDouble();
  } else {
    op.inputs = {args[0].toTensor(), args[1].toTensor()};
    if (op.kind == ShadowOp::Kind::linear) op.inputs.push_back(optional_tensor(args[2]));
    if (op.inputs[0].dim() < 2 || op.inputs[1].dim() < 2) return std::nullopt;
  }
  const auto dtype = op.inputs[0].scalar_type();
  if (dtype != torch::kFloat && dtype != torch::kBFloat16 && dtype != torch::kHalf && dtype != torch::kDouble)
    return std::nullopt;
  for (const auto& t : op.inputs)
    if (t.defined() && (t.scalar_type() != dtype || t.device() != op.inputs[0].device())) return std::nullopt;
  return op;
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (!t_check || t_busy) return nullptr;
  auto op = candidate(fn);
  if (!op) return nullptr;
  auto capture = std::make_unique<Capture>();
  capture->dtype = op->inputs[0].scalar_type();
  const bool nested = !t_open.empty() && t_open.back() == capture->dtype;
  t_open.push_back(capture->dtype);
  if (nested) return capture;
  capture->key = op->describe();
  capture->wanted = t_check->wants(capture->key);
  if (capture->wanted) capture->op = std::move(*op);
  return capture;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* capture = static_cast<Capture*>(ctx);
  if (!capture) return;
  t_open.pop_back();
  if (capture->key.empty() || !t_check) return;
  const auto& outputs = fn.outputs();
  if (outputs.empty() || !outputs[0].isTensor()) return;
  const auto& output = outputs[0].toTensor();
  if (output.scalar_type() != capture->dtype) {
    t_check->ineligible(capture->key);
    return;
  }
  if (!capture->wanted) return;
  capture->op.output = output;
  t_busy = true;
  try {
    t_check->captured(capture->op);
  } catch (...) {
    t_busy = false;
    throw;
  }
  t_busy = false;
}

// The op with its inputs on `device` in `dtype`.
ShadowOp variant(const ShadowOp& op, const torch::Device& device, torch::ScalarType dtype) {
  ShadowOp v{.kind = op.kind, .eps = op.eps};
  for (const auto& t : op.inputs) v.inputs.push_back(t.defined() ? t.to(device, dtype) : t);
  return v;
}

// Runs `op` once more and judges the new result (a host read: only after a mismatch).
bool wrong_again(const ShadowOp& op) { return shadow_mismatch(shadow_verdict(op, op.rerun())[0].item<double>()); }

}  // namespace

torch::Tensor ShadowOp::rerun() const {
  torch::NoGradGuard no_grad;
  AutocastGuard no_autocast(inputs[0].device().type(), AutocastState{.enabled = false});
  switch (kind) {
    case Kind::linear: return at::linear(inputs[0], inputs[1], inputs[2]);
    case Kind::matmul: return at::matmul(inputs[0], inputs[1]);
    case Kind::layer_norm: return at::layer_norm(inputs[0], inputs[1].sizes(), inputs[1], inputs[2], eps);
  }
  return {};
}

std::string ShadowOp::describe() const {
  std::vector<std::string> shapes;
  for (const auto& t : inputs)
    if (t.defined()) shapes.push_back(fmt::format("[{}]", fmt::join(t.sizes(), ", ")));
  return fmt::format("{} {} {}", op_name(kind), fmt::join(shapes, " x "), c10::toString(inputs[0].scalar_type()));
}

bool shadow_mismatch(double worst_error_over_bound) { return !(worst_error_over_bound <= 1.0); }

torch::Tensor shadow_verdict(const ShadowOp& op, const torch::Tensor& output) {
  torch::NoGradGuard no_grad;
  AutocastGuard no_autocast(op.inputs[0].device().type(), AutocastState{.enabled = false});
  const auto& y = output.defined() ? output : op.output;
  switch (op.kind) {
    case ShadowOp::Kind::linear: return gemm_verdict(op.inputs[0], op.inputs[1].t(), op.inputs[2], y, y.scalar_type());
    case ShadowOp::Kind::matmul: return gemm_verdict(op.inputs[0], op.inputs[1], {}, y, y.scalar_type());
    case ShadowOp::Kind::layer_norm: return layer_norm_verdict(op, y);
  }
  return {};
}

ShadowCheck::ShadowCheck(const DiagnosticsConfig& cfg, FindingLog& log, Trainer& trainer)
    : Detector(cfg, log), trainer_(trainer) {}

ShadowCheck::~ShadowCheck() { disarm(); }

void ShadowCheck::on_step_begin(int64_t /*step*/) { read_verdict(); }

void ShadowCheck::before_forward(int64_t step, bool first) {
  if (!first || trainer_.replaying() || step == armed_step_ || step % cfg_.shadow_check_interval != 0) return;
  armed_step_ = step;
  seen_.clear();
  if (retry_) {
    // The last check of this op was not judged (non-finite inputs: a NaN from an earlier layer's
    // call of it poisons the later ones): its first occurrence now, whose inputs come from other ops.
    target_ = {*retry_, 0};
    retry_.reset();
  } else {
    // Key-major rotation: every op within keys_.size() steps; its occurrences (layers) in turn.
    // (The first step knows no ops yet: it checks the first one the forward runs.)
    if (!keys_.empty()) {
      const auto n = static_cast<int64_t>(keys_.size());
      const auto& key = keys_[round_ % n];
      target_ = {key, (round_ / n) % std::max<int64_t>(1, occurrences_[key])};
    }
    ++round_;
  }
  t_check = this;
  t_open.clear();
  callback_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_op_start, &on_op_end)
                                             .needsInputs(true)
                                             .needsOutputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
}

torch::Tensor ShadowCheck::on_logits(torch::Tensor logits, int64_t /*step*/) {
  disarm();
  return logits;
}

void ShadowCheck::disarm() {
  if (callback_ == 0) return;
  at::removeCallback(callback_);
  callback_ = 0;
  t_check = nullptr;
  if (!checked_) return;
  pending_.emplace(Pending{.step = armed_step_, .key = target_.first, .occurrence = target_.second,
                           .occurrences = occurrences_[target_.first], .op = std::move(*checked_),
                           .verdict = DeferredScalars({verdict_})});
  checked_.reset();
  verdict_ = torch::Tensor();
}

bool ShadowCheck::wants(const std::string& key) {
  if (ineligible_.count(key)) return false;
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) keys_.push_back(key);
  const int64_t occurrence = seen_[key]++;
  occurrences_[key] = std::max(occurrences_[key], occurrence + 1);
  if (target_.first.empty()) target_ = {key, 0};  // the first step: the first op seen
  return key == target_.first && occurrence == target_.second;
}

void ShadowCheck::ineligible(const std::string& key) {
  if (!ineligible_.insert(key).second) return;
  keys_.erase(std::remove(keys_.begin(), keys_.end(), key), keys_.end());
}

void ShadowCheck::captured(const ShadowOp& op) {
  verdict_ = shadow_verdict(op);
  // Copies for a re-run if the verdict says mismatch: the optimizer changes the weights in place.
  ShadowOp kept{.kind = op.kind, .eps = op.eps};
  for (const auto& t : op.inputs) kept.inputs.push_back(t.defined() ? t.detach().clone() : t);
  checked_ = std::move(kept);
}

void ShadowCheck::finish() { read_verdict(); }

void ShadowCheck::read_verdict() {
  if (!pending_) return;
  Pending p = std::move(*pending_);
  pending_.reset();
  const auto v = p.verdict.get();
  const double worst = std::isnan(v[0]) ? std::numeric_limits<double>::infinity() : v[0], relative = v[1];
  if (!shadow_mismatch(v[0])) {
    if (v[2] == 0 && p.occurrence > 0) retry_ = p.key;
    return;
  }
  // The same op on the same inputs once more (a wrong result again: persistent), in fp32 when
  // it ran in bf16/fp16, and on the CPU when it ran on a GPU (fp16 CPU GEMMs may not exist).
  const auto& op = p.op;
  const auto device = op.inputs[0].device();
  const auto dtype = op.inputs[0].scalar_type();
  // Classified and capped like every re-run anomaly (rerun.hpp): a persistent or a repeated
  // transient wrong result fails; a one-off transient warns.
  RerunOutcome outcome{.reproducible = wrong_again(op)};
  if (outcome.reproducible) {
    outcome.also_in_fp32 = reduced_precision(dtype) ? wrong_again(variant(op, device, torch::kFloat)) : true;
    if (!device.is_cpu())
      outcome.also_on_cpu = wrong_again(variant(op, torch::kCPU, dtype == torch::kHalf ? torch::kFloat : dtype));
  }
  Finding f{.component = component::rocblas, .signature = "gemm_shadow_mismatch", .severity = Severity::fail,
            .step = p.step, .rank = trainer_.sync().rank(),
            .message = fmt::format("{} (occurrence {} of {} in the forward) at step {}: error {:.3g}x its float64 "
                                   "bound (relative error {:.3g})",
                                   p.key, p.occurrence, p.occurrences, p.step, worst, relative),
            .evidence = {{"op", p.key}, {"occurrence", p.occurrence}, {"worst_error_over_bound", json_number(worst)},
                         {"relative_error", json_number(relative)}, {"bound_factor", kBoundFactor},
                         {"reproducible", outcome.reproducible}}};
  transients_.apply(f, outcome);
  report(std::move(f));
}

}  // namespace rcl
