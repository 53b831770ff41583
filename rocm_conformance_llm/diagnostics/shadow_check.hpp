// Shadow check (rocBLAS/hipBLASLt): every diagnostics.shadow_check_interval steps, one GEMM of
// that very step's forward (an nn::Linear, an attention matmul; or a LayerNorm) is recomputed in
// float64 on the same inputs, on the device, and compared with a bound from the dtype's unit
// roundoff and K. The op is chosen in a key-major rotation over the distinct (op, shapes, dtype)
// the forward runs, so every shape is checked within as many steps as the model has distinct
// shapes (7 on smoke), and over its occurrences (layers) in turn on later visits. One call per
// step, not every layer's: a wrong result for one shape (a bad kernel pick, dropped stores, a
// wrong split-K reduction) shows in every layer's call of it, and on a GPU the check's cost is
// the kernels it launches (the H100 run measured +55.6% step time on `small` when it judged all
// 12 layers). A call whose inputs were not finite (a NaN from an earlier layer's call of the same
// shape) is judged again at its first occurrence on the next step.
//
// The ops are captured through an ATen RecordFunction callback on the training thread, armed
// only for the forward of the step's first micro-batch; the verdict stays on the device and
// reaches the host one step later (no host sync in an ordinary step). On a mismatch the check
// runs the op again on copies of its inputs: a second wrong result means reproducible.
//
// The GEMM bound (C = A B (+ bias), A: M x K, B: K x N, output dtype with unit roundoff u,
// fp32 accumulation u_acc = 2^-24; projected on a fixed +-1 vector x, so the float64 work is
// O(MK + KN + MN), not O(MNK)):
//   for every row i:  |(C x)_i - (A (B x))_i - bias . x|  <=  8 (u ||c_i|| + u_acc sqrt(K) ||a_i|| ||B||_F)
// Derivation: an honest element error is at most u|c_ij| (rounding the output) plus the
// accumulation error, <= u_acc sqrt(K) ||a_i|| ||b_j|| (a sequential FMA sum of random-sign
// products stays near u_acc ||a_i|| ||b_j|| / 2.4; same-sign products reach u_acc sqrt(K)/3 of
// it). So the row's error vector e_i has ||e_i|| <= the bracket; x's signs do not depend on e,
// so |e_i . x| has standard deviation ||e_i|| and exceeds 8 ||e_i|| with probability below
// 2 exp(-32) (Hoeffding). What it catches: NaN/Inf from finite inputs, any element off by more
// than ~8 u ||c_i|| (fp32: a 1% error of every element, or one element 1e6 off), in every
// dtype; a 1% error in a bf16 output (2.5 bf16 ulps) is inside the bound and is not reported.
// LayerNorm, per element, with D = normalized size, m_i = rms(x_i) / sqrt(var_i + eps) >= 1:
//   |y - r| <= 8 (u (|r| + |bias|) + u_acc sqrt(D) |w| m_i^2 (1 + |x_hat|))
// (the mean and variance are fp32 sums of D terms; a one-pass variance loses m_i^2 relative).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/diagnostics/detector.hpp"
#include "rocm_conformance_llm/diagnostics/rerun.hpp"
#include "rocm_conformance_llm/utils/deferred_scalars.hpp"

namespace rcl {

class Trainer;

// One op as the forward ran it.
struct ShadowOp {
  enum class Kind { linear, matmul, layer_norm };
  Kind kind = Kind::linear;
  // linear: x, weight, bias (may be undefined); matmul: a, b; layer_norm: x, weight, bias.
  std::vector<torch::Tensor> inputs;
  double eps = 0.0;  // layer_norm (its normalized shape is the weight's)
  torch::Tensor output;

  // Runs the op again on its inputs, in their dtype (autocast off).
  torch::Tensor rerun() const;
  // "aten::matmul [16, 64, 64] x [64, 192] Float", the key the rotation uses. (libtorch's C++
  // nn::Linear is a matmul with Wᵀ plus an in-place bias add, not aten::linear.)
  std::string describe() const;
};

// The verdict of one op, decided on the device: float64 [worst ratio of error to bound (NaN for a
// NaN result), relative error, 1 if every row was judged]. `output` defaults to op.output. Rows
// whose inputs hold NaN/Inf, or whose true result may exceed the dtype's range (||a_i|| max_j
// ||b_j|| > its largest finite value: an fp16 overflow), are not judged: the non-finite detectors
// own those.
torch::Tensor shadow_verdict(const ShadowOp& op, const torch::Tensor& output = {});
// Whether a verdict's worst ratio says wrong result (above 1, or NaN).
bool shadow_mismatch(double worst_error_over_bound);

// Loop-side: see the top of this file. Findings: gemm_shadow_mismatch (fail).
class ShadowCheck final : public Detector {
 public:
  ShadowCheck(const DiagnosticsConfig& cfg, FindingLog& log, Trainer& trainer);
  ~ShadowCheck() override;
  void on_step_begin(int64_t step) override;
  void before_forward(int64_t step, bool first) override;
  torch::Tensor on_logits(torch::Tensor logits, int64_t step) override;
  void finish() override;

  // For the RecordFunction callbacks (free functions): whether to capture this call of `key`.
  bool wants(const std::string& key);
  void captured(const ShadowOp& op);
  void ineligible(const std::string& key);  // its output dtype differs from its inputs' (autocast's outer call)

 private:
  void disarm();
  void read_verdict();

  struct Pending {
    int64_t step = 0;
    std::string key;
    int64_t occurrence = 0, occurrences = 0;  // which call of `key` in the forward, of how many
    ShadowOp op;                              // inputs copied: the optimizer updates weights in place
    DeferredScalars verdict;                  // shadow_verdict's three
  };

  Trainer& trainer_;
  uint64_t callback_ = 0;  // the armed RecordFunction callback's handle, 0 when not armed
  int64_t armed_step_ = -1;
  int64_t round_ = 0;
  std::vector<std::string> keys_;  // distinct ops in the order the forward first ran them
  std::map<std::string, int64_t> occurrences_;  // calls of each key in one forward
  std::map<std::string, int64_t> seen_;         // calls of each key so far in this forward
  std::set<std::string> ineligible_;
  std::pair<std::string, int64_t> target_;  // this step's (key, occurrence)
  std::optional<std::string> retry_;        // a key to judge at occurrence 0 next (see the top)
  std::optional<ShadowOp> checked_;         // this step's, kept for a re-run
  torch::Tensor verdict_;
  std::optional<Pending> pending_;
  TransientHistory transients_;
};

}  // namespace rcl
