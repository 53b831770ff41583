#include "rocm_conformance_llm/workload/op_tap.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

namespace {

thread_local OpObserver* t_observer = nullptr;

// Only called with an observer armed (the taps test first: an idle tap builds nothing).
void report(TappedOp::Kind kind, std::vector<torch::Tensor> inputs, const torch::Tensor& output, double eps = 0.0) {
  OpObserver* observer = t_observer;
  t_observer = nullptr;  // the observer's own ops are not the model's
  try {
    observer->observe(TappedOp{.kind = kind, .inputs = std::move(inputs), .eps = eps, .output = output});
  } catch (...) {
    t_observer = observer;
    throw;
  }
  t_observer = observer;
}

const char* op_name(TappedOp::Kind kind) {
  switch (kind) {
    case TappedOp::Kind::linear: return "aten::linear";
    case TappedOp::Kind::matmul: return "aten::matmul";
    case TappedOp::Kind::layer_norm: return "aten::layer_norm";
  }
  return "?";
}

bool floating(torch::ScalarType t) {
  return t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf || t == torch::kDouble;
}

}  // namespace

ObservedOps::ObservedOps(OpObserver& observer) { t_observer = &observer; }
ObservedOps::~ObservedOps() { t_observer = nullptr; }

torch::Tensor TappedOp::rerun() const {
  torch::NoGradGuard no_grad;
  AutocastGuard no_autocast(inputs[0].device().type(), AutocastState{.enabled = false});
  switch (kind) {
    case Kind::linear: return gemm_linear(inputs[0], inputs[1], inputs[2]);
    case Kind::matmul: return gemm_matmul(inputs[0], inputs[1]);
    case Kind::layer_norm: return at::layer_norm(inputs[0], inputs[1].sizes(), inputs[1], inputs[2], eps);
  }
  return {};
}

std::string TappedOp::describe() const {
  std::vector<std::string> shapes;
  for (const auto& t : inputs)
    if (t.defined()) shapes.push_back(fmt::format("[{}]", fmt::join(t.sizes(), ", ")));
  const auto dtype = output.defined() ? output.scalar_type() : inputs[0].scalar_type();
  return fmt::format("{} {} {}", op_name(kind), fmt::join(shapes, " x "), c10::toString(dtype));
}

std::vector<int64_t> TappedOp::key() const {
  const auto dtype = output.defined() ? output.scalar_type() : inputs[0].scalar_type();
  std::vector<int64_t> out{int64_t(kind), int64_t(dtype)};
  for (const auto& t : inputs) {
    out.push_back(t.defined() ? t.dim() : -1);
    if (t.defined()) out.insert(out.end(), t.sizes().begin(), t.sizes().end());
  }
  return out;
}

std::optional<TappedOp> TappedOp::as_computed() const {
  if (inputs.empty() || !inputs[0].defined() || !output.defined()) return std::nullopt;
  const auto dtype = output.scalar_type();
  if (!floating(dtype)) return std::nullopt;
  if (kind != Kind::layer_norm && (inputs[0].dim() < 2 || inputs[1].dim() < 2)) return std::nullopt;
  TappedOp op{.kind = kind, .eps = eps, .output = output};
  for (const auto& t : inputs) {
    if (t.defined() && (!floating(t.scalar_type()) || t.device() != output.device())) return std::nullopt;
    // Autocast's cast of a float32 operand (a weight) to the GEMM's bf16/fp16.
    op.inputs.push_back(t.defined() && t.scalar_type() != dtype ? t.detach().to(dtype) : t);
  }
  return op;
}

torch::Tensor tapped_linear(torch::nn::Linear& layer, const torch::Tensor& x, const char* site) {
  auto y = observed_linear(x, layer->weight, layer->bias, site);
  if (t_observer) report(TappedOp::Kind::linear, {x, layer->weight, layer->bias}, y);
  return y;
}

torch::Tensor tapped_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            const char* site) {
  auto y = observed_linear(x, weight, bias, site);
  if (t_observer) report(TappedOp::Kind::linear, {x, weight, bias}, y);
  return y;
}

torch::Tensor tapped_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  auto y = gemm_matmul(a, b);
  if (t_observer) report(TappedOp::Kind::matmul, {a, b}, y);
  return y;
}

torch::Tensor tapped_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                double eps) {
  auto y = at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
  if (t_observer) report(TappedOp::Kind::layer_norm, {x, weight, bias}, y, eps);
  return y;
}

}  // namespace rcl
