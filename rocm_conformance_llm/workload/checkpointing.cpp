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
  CheckpointedFunction fn;
  RngSnapshot rng;
  AutocastState autocast;
  GemmObserver* gemms = nullptr;  // the recomputed GEMMs are the step's too
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Function::apply runs this with gradients disabled: no activations are kept. `inputs` is a
  // TensorList so that apply counts each of them as a differentiable input.
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<Recomputation> replay, at::TensorList inputs) {
    const auto device = inputs.front().device();
    replay->rng = capture_rng(device);
    replay->autocast = current_autocast(device.type());
    replay->gemms = armed_gemm_observer();
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    return replay->fn(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay = c10::static_intrusive_pointer_cast<Recomputation>(ctx->saved_data["replay"].toCapsule());
    variable_list inputs;
    for (const auto& saved : ctx->get_saved_variables()) inputs.push_back(saved.detach().requires_grad_(true));
    const auto device = inputs.front().device();

    // Replay under the forward's generator state, then put the generator back where it was
    // so checkpointing leaves the random stream of the rest of the step untouched.
    const RngSnapshot after_forward = capture_rng(device);
    restore_rng(replay->rng, device);
    variable_list outputs;
    {
      torch::AutoGradMode grad_enabled(true);
      AutocastGuard autocast(device.type(), replay->autocast);
      const ObservedGemms gemms(replay->gemms);
      outputs = replay->fn(inputs);
    }
    restore_rng(after_forward, device);

    // An output the rest of the graph did not use has no gradient.
    variable_list used, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!grad_outputs[i].defined()) continue;
      used.push_back(outputs[i]);
      grads.push_back(grad_outputs[i]);
    }
    torch::autograd::backward(used, grads);
    variable_list input_grads{torch::Tensor()};  // nothing for the non-tensor `replay` argument
    for (const auto& input : inputs) input_grads.push_back(input.grad());
    return input_grads;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint_tensors(CheckpointedFunction fn, const std::vector<torch::Tensor>& inputs) {
  auto replay = c10::make_intrusive<Recomputation>();
  replay->fn = std::move(fn);
  return CheckpointFunction::apply(replay, at::TensorList(inputs));
}

torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& input) {
  return checkpoint_tensors(
             [fn = std::move(fn)](const std::vector<torch::Tensor>& in) { return std::vector{fn(in[0])}; }, {input})
      .front();
}

}  // namespace rcl
