// Shadow check (rocBLAS/hipBLASLt): every diagnostics.shadow_check_interval steps, one GEMM of
// that very step's forward (an nn::Linear, an attention matmul; or a LayerNorm) is recomputed in
// float64 on the same inputs, on the device, and compared with a bound from the dtype's unit
// roundoff and K. The op is chosen in a key-major rotation over the distinct (op, shapes, dtype)
// the forward runs, so every shape is checked within as many steps as the model has distinct
// shapes (8 on smoke), and over its occurrences (layers) in turn on later visits. One call per
// step, not every layer's: a wrong result for one shape (a bad kernel pick, dropped stores, a
// wrong split-K reduction) shows in every layer's call of it, and on a GPU the check's cost is
// the kernels it launches (the H100 run measured +55.6% step time on `small` when it judged all
// 12 layers). A call whose inputs were not finite (a NaN from an earlier layer's call of the same
// shape) is judged again at its first occurrence on the next step.
//
// The ops reach the check through the model's taps (workload/op_tap.hpp), armed only for the forward of
// the step's first micro-batch. On the CPU the verdict is one pass over the operands in plain
// loops (ATen's ~30 small ops cost ~5% of a smoke step in dispatch and float64 copies); on a GPU
// it is ATen ops on the device, and the verdict reaches the host one step later (no host sync
// in an ordinary step). On a mismatch the check runs the op again on copies of its inputs: a
// second wrong result means reproducible.
//
// The bound, its derivation and what it catches: checks/detectors/shadow_bound.hpp; the verdict on one op,
// on the device or in the host pass: checks/detectors/shadow_verdict.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"
#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/op_tap.hpp"

namespace rcl {

class LoopAccess;

// Loop-side: see the top of this file. Findings: gemm_shadow_mismatch (fail).
class ShadowCheck final : public Detector, private OpObserver {
 public:
  ShadowCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop);
  ~ShadowCheck() override;
  void on_step_begin(int64_t step) override;
  void before_forward(int64_t step, bool first) override;
  torch::Tensor on_logits(torch::Tensor logits, int64_t step) override;
  void finish() override;

 private:
  using OpKey = std::vector<int64_t>;  // TappedOp::key

  void observe(const TappedOp& op) override;
  bool wants(const OpKey& key);
  void captured(const TappedOp& op);
  void disarm();
  void read_verdict();

  struct Pending {
    int64_t step = 0;
    OpKey key;
    std::string name;                            // TappedOp::describe
    int64_t occurrence = 0, occurrences = 0;     // which call of `key` in the forward, of how many
    std::optional<TappedOp> op{};                // inputs copied for a re-run: the optimizer updates weights in place
    std::optional<DeferredScalars> on_device{};  // a GPU op's verdict, read one step late
    std::vector<double> verdict{};               // a CPU op's, decided at once
  };

  LoopAccess& loop_;
  std::optional<ObservedOps> armed_;
  int64_t armed_step_ = -1;
  int64_t round_ = 0;
  std::vector<OpKey> keys_;               // distinct ops in the order the forward first ran them
  std::map<OpKey, int64_t> occurrences_;  // calls of each key in one forward
  std::map<OpKey, int64_t> seen_;         // calls of each key so far in this forward
  std::pair<OpKey, int64_t> target_;      // this step's (key, occurrence)
  std::optional<OpKey> retry_;            // a key to judge at occurrence 0 next (see the top)
  std::optional<Pending> checked_;        // this step's, until the forward ends
  std::optional<Pending> pending_;
  TransientHistory transients_;
};

}  // namespace rcl
