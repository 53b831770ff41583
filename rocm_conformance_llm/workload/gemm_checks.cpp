#include "rocm_conformance_llm/workload/gemm_checks.hpp"

#include <optional>

#include <fmt/format.h>

#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local GemmObserver* t_gemm_observer = nullptr;
thread_local int64_t t_layer = -1;
thread_local std::optional<GemmPass> t_corrupt_next;

// What the backward needs besides the saved operands, in a capsule (the context stores IValues).
struct LinearSite : torch::CustomClassHolder {
  GemmObserver* observer = nullptr;
  const char* site = "";
  int64_t layer = -1;
  std::vector<int64_t> input_sizes;
  bool with_bias = false;
  c10::ScalarType input_dtype = c10::ScalarType::Float, weight_dtype = c10::ScalarType::Float,
                  bias_dtype = c10::ScalarType::Float;
};

// A stored value made wrong by 100 times the largest one, as a flipped high exponent bit makes it
// (the top one multiplies by 2^128): far outside any rounding, small enough that training goes on.
void corrupt_one_element(const torch::Tensor& c) {
  torch::NoGradGuard no_grad;
  c.select(0, 0).select(0, 0).add_(c.abs().max().add(1.0).mul(100.0));
}

void report(const LinearSite& site, GemmPass pass, torch::Tensor a, torch::Tensor b, torch::Tensor bias,
            torch::Tensor c) {
  if (t_corrupt_next == pass) {
    t_corrupt_next.reset();
    corrupt_one_element(c);
  }
  site.observer->observe_gemm(GemmCall{.site = site.site,
                                       .layer = site.layer,
                                       .pass = pass,
                                       .a = std::move(a),
                                       .b = std::move(b),
                                       .bias = std::move(bias),
                                       .c = std::move(c)});
}

// nn::functional::linear with its GEMMs reported: the forward's, and the backward's two gradient
// GEMMs, computed as libtorch's own linear backward computes them (dX = dY W, dW = dY^T X; the
// bias gradient is a sum, no GEMM).
struct ObservedLinearFunction : torch::autograd::Function<ObservedLinearFunction> {
  // With a bias and without: libtorch 1.13's autograd functions take no undefined tensor input.
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<LinearSite> site, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    return linear_forward(ctx, std::move(site), x, weight, bias);
  }
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<LinearSite> site, const torch::Tensor& x,
                               const torch::Tensor& weight) {
    return linear_forward(ctx, std::move(site), x, weight, {});
  }

  static torch::Tensor linear_forward(AutogradContext* ctx, c10::intrusive_ptr<LinearSite> site,
                                      const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
    const auto device_type = x.device().type();
    // Autocast casts a linear's operands to its dtype; done here explicitly, so the function
    // saves and checks the operands the GEMM really multiplied.
    const auto autocast = current_autocast(device_type);
    const auto dtype = autocast.enabled ? autocast.dtype : x.scalar_type();
    AutocastGuard no_autocast(device_type, AutocastState{.enabled = false});
    const auto xc = x.to(dtype), wc = weight.to(dtype);
    const auto bc = bias.defined() ? bias.to(dtype) : bias;
    auto y = gemm_linear(xc, wc, bc);
    site->input_sizes = x.sizes().vec();
    site->input_dtype = x.scalar_type();
    site->weight_dtype = weight.scalar_type();
    site->with_bias = bias.defined();
    if (bias.defined()) site->bias_dtype = bias.scalar_type();
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["site"] = c10::IValue::make_capsule(site);
    const int64_t k = wc.size(1), n = wc.size(0);
    report(*site, GemmPass::forward, xc.reshape({-1, k}), wc.t(), bc, y.reshape({-1, n}));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto site = c10::static_intrusive_pointer_cast<LinearSite>(ctx->saved_data["site"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    const auto &xc = saved[0], &wc = saved[1];
    const int64_t n = wc.size(0), k = wc.size(1);
    AutocastGuard no_autocast(xc.device().type(), AutocastState{.enabled = false});
    const auto dy = grad_outputs[0].to(wc.scalar_type()).reshape({-1, n});
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      dx = gemm_mm(dy, wc);
      report(*site, GemmPass::grad_input, dy, wc, {}, dx);
      dx = dx.reshape(site->input_sizes).to(site->input_dtype);
    }
    if (ctx->needs_input_grad(1)) {
      const auto x2 = xc.reshape({-1, k});
      dw = gemm_mm(dy.t(), x2);
      report(*site, GemmPass::grad_weight, dy.t(), x2, {}, dw);
      dw = dw.to(site->weight_dtype);
    }
    // Nothing for the non-tensor `site` argument.
    if (!site->with_bias) return {torch::Tensor(), dx, dw};
    if (ctx->needs_input_grad(2)) db = dy.sum(0).to(site->bias_dtype);
    return {torch::Tensor(), dx, dw, db};
  }
};

}  // namespace

const char* gemm_pass_name(GemmPass pass) {
  switch (pass) {
    case GemmPass::forward: return "forward";
    case GemmPass::grad_input: return "backward dX";
    case GemmPass::grad_weight: return "backward dW";
  }
  return "?";
}

std::string GemmCall::name() const {
  return layer >= 0 ? fmt::format("block{}.{} {}", layer, site, gemm_pass_name(pass))
                    : fmt::format("{} {}", site, gemm_pass_name(pass));
}

ObservedGemms::ObservedGemms(GemmObserver* observer) : previous_(t_gemm_observer) {
  if (observer) t_gemm_observer = observer;
}
ObservedGemms::~ObservedGemms() { t_gemm_observer = previous_; }

GemmObserver* armed_gemm_observer() { return t_gemm_observer; }

GemmLayerScope::GemmLayerScope(int64_t layer) : previous_(t_layer) { t_layer = layer; }
GemmLayerScope::~GemmLayerScope() { t_layer = previous_; }

torch::Tensor observed_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const char* site) {
  if (!t_gemm_observer) {
    auto y = gemm_linear(x, weight, bias);
    if (t_corrupt_next == GemmPass::forward) {  // the fault strikes whether or not a check looks
      t_corrupt_next.reset();
      corrupt_one_element(y.reshape({-1, y.size(-1)}));
    }
    return y;
  }
  auto linear_site = c10::make_intrusive<LinearSite>();
  linear_site->observer = t_gemm_observer;
  linear_site->site = site;
  linear_site->layer = t_layer;
  if (!bias.defined()) return ObservedLinearFunction::apply(linear_site, x, weight);
  return ObservedLinearFunction::apply(linear_site, x, weight, bias);
}

void corrupt_next_gemm(GemmPass pass) { t_corrupt_next = pass; }

}  // namespace rcl
