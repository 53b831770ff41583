// The model's GEMMs and norms as it runs them, reported to one observer armed on the training
// thread for one forward: the shadow check (checks/shadow_check.hpp) recomputes one of them
// in float64. The model calls these instead of the ops themselves. Explicit calls, not an ATen
// RecordFunction callback: a callback that asks for inputs makes every op of the forward pay for
// it, armed or idle (+4% step time on smoke, measured with the callback returning at once); a tap
// costs one thread-local test per call and reports only the ops below.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace rcl {

// One op as the forward ran it.
struct TappedOp {
  enum class Kind { linear, matmul, layer_norm };
  Kind kind = Kind::linear;
  // linear: x, weight, bias (may be undefined); matmul: a, b; layer_norm: x, weight, bias.
  std::vector<torch::Tensor> inputs{};
  double eps = 0.0;  // layer_norm (its normalized shape is the weight's)
  torch::Tensor output{};

  // Runs the op again on its inputs, in their dtype (autocast off), as the model runs it.
  torch::Tensor rerun() const;
  // "aten::linear [16, 64, 64] x [192, 64] x [192] Float": kind, input shapes and the dtype the
  // op computed in (the output's: autocast's, where it cast the inputs).
  std::string describe() const;
  // The same identity as numbers (kind, dtype, each input's rank and sizes): cheap to build and
  // compare for every op of an armed forward.
  std::vector<int64_t> key() const;
  // The op with its inputs in the dtype it computed in: under autocast the model hands float32
  // weights to a linear that runs in bf16/fp16; this casts them the way autocast did. Returns
  // nullopt when the op is no GEMM/norm the shadow check can judge (non-floating, mixed devices).
  std::optional<TappedOp> as_computed() const;
};

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void observe(const TappedOp& op) = 0;
};

// Arms `observer` on this thread until destroyed (or `disarm()`); one at a time.
class ObservedOps {
 public:
  explicit ObservedOps(OpObserver& observer);
  ~ObservedOps();
  ObservedOps(const ObservedOps&) = delete;
  ObservedOps& operator=(const ObservedOps&) = delete;
};

// The taps: each runs the op as before and, when an observer is armed, reports it. A linear runs
// through observed_linear (workload/gemm_checks.hpp), so the checksum check sees its GEMMs; `site`
// names it there ("attn.qkv", ...).
torch::Tensor tapped_linear(torch::nn::Linear& layer, const torch::Tensor& x, const char* site);
torch::Tensor tapped_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            const char* site);
torch::Tensor tapped_matmul(const torch::Tensor& a, const torch::Tensor& b);
torch::Tensor tapped_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                double eps);

}  // namespace rcl
