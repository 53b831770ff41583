#include "rocm_conformance_llm/workload/checkpointing.hpp"

#include "rocm_conformance_llm/utils/reproducibility.hpp"
#include "rocm_conformance_llm/workload/gemm_checks.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs to replay the forward exactly. Held in a capsule because the autograd
// context only stores IValues.
struct Recomputation : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  RngSnapshot rng;
  AutocastState autocast;
  GemmObserver* gemms = nullptr;  // the recomputed GEMMs are the step's too
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Function::apply runs this with gradients disabled: no activations are kept.
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<Recomputation> replay,
                               const torch::Tensor& input) {
    const auto device = input.device();
    replay->rng = capture_rng(device);
    replay->autocast = current_autocast(device.type());
    replay->gemms = armed_gemm_observer();
    ctx->save_for_backward({input});
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return replay->fn(input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay = c10::static_intrusive_pointer_cast<Recomputation>(ctx->saved_data["replay"].toCapsule());
    const auto input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    const auto device = input.device();

    // Replay under the forward's generator state, then put the generator back where it was
    // so checkpointing leaves the random stream of the rest of the step untouched.
    const RngSnapshot after_forward = capture_rng(device);
    restore_rng(replay->rng, device);
    torch::Tensor output;
    {
      torch::AutoGradMode grad_enabled(true);
      AutocastGuard autocast(device.type(), replay->autocast);
      const ObservedGemms gemms(replay->gemms);
      output = replay->fn(input);
    }
    restore_rng(after_forward, device);

    torch::autograd::backward({output}, {grad_outputs[0]});
    return {torch::Tensor(), input.grad()};  // nothing for the non-tensor `replay` argument
  }
};

}  // namespace

torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& input) {
  auto replay = c10::make_intrusive<Recomputation>();
  replay->fn = std::move(fn);
  return CheckpointFunction::apply(replay, input);
}

}  // namespace rcl
