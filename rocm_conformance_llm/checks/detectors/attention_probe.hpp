// Attention parity probe (AOTriton/CK flash and memory-efficient SDPA on ROCm): the model's own
// Q/K/V (block 0, captured by a forward of real tokens) go through every attention backend this
// build has on the device (the explicit math path, then SDPA restricted to its math, flash and
// memory-efficient kernels), in fp32/bf16/fp16, with and without a padding mask, with V
// contiguous and strided, and each output is compared with the explicit math path in float64 on
// the host. It answers the public reports of fused kernels that are right without a mask and
// wrong with one (pytorch/pytorch#147460, AOTriton 0.8.0: max diff 1.73 vs math) or with a
// non-contiguous V (ROCm/pytorch#3230).
//
// Inputs are rounded to the dtype first and the reference uses those rounded values, so only
// the kernel's own error is measured, in units of max|V| (the output is a convex combination of
// V's rows). With u the unit roundoff of the dtype (fp32 2^-24, fp16 2^-11, bf16 2^-8), s the
// largest |scaled score| and T the keys:
//   max |O - R| / max|V|  <=  8 u (1 + s) + 8 sqrt(T) 2^-24
// Honest kernels lose about u to the rounding of the probabilities and of the output and u s to
// the rounding of the scores (a score error e moves a probability by about e relative), and
// sqrt(T) 2^-24 to fp32 accumulation; the bound leaves a 2-4x margin over that worst case. A
// wrong masked row, as in #147460, costs O(1) max|V|.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/model.hpp"

namespace rcl {

class FaultPlan;
class LoopAccess;

// The probe uses the first two sequences (the second one padded) and two heads: the float64
// host reference stays cheap at the probe's longer sequence.
inline constexpr int64_t kProbeSequences = 2;
inline constexpr int64_t kProbeHeads = 2;
// The padding the probe masks when the run itself pads nothing.
inline constexpr double kProbePadFraction = 0.25;

// Block 0's Q/K/V for `tokens` [B, T], float32 on the model's device: one eval-mode forward
// without gradients or autocast (no dropout, so the training RNG stream is untouched).
AttentionInputs capture_attention_inputs(GPT& model, const torch::Tensor& tokens);

// Bound on max|O - R| / max|V| (see above).
double attention_bound(torch::ScalarType dtype, double max_abs_score, int64_t keys);

// "math" (the explicit path), then with SDPA "sdpa_math", "sdpa_flash", "sdpa_mem_efficient".
std::vector<std::string> attention_probe_backends();

struct AttentionProbeResult {
  std::string backend;
  std::string dtype;       // fp32 | bf16 | fp16
  bool masked = false;     // padding mask (else causal only)
  bool strided_v = false;  // V as a strided view
  bool supported = true;   // false: this device/build has no such kernel (see `reason`)
  std::string reason;
  bool nonfinite = false;
  double max_error = 0.0;  // max |O - R|
  double bound = 0.0;      // attention_bound(..) * max|V|
  bool injected = false;   // the attention-mask-corrupt fault struck this output
  bool passed() const { return !supported || (!nonfinite && max_error <= bound); }
  nlohmann::json to_json() const;
  std::string describe() const;  // "sdpa_flash fp16 with padding mask, strided V"
};

struct AttentionProbeOptions {
  int64_t seq_len = 0;  // the captured sequence is tiled up to this (0: as captured)
  double pad_fraction = kProbePadFraction;
  // The attention-mask-corrupt fault: the last backend that serves a masked fp32 input gets a
  // wrong masked output (its rows shifted by max|V|), as #147460's kernel did.
  bool corrupt_masked = false;
  // The run's probe: cfg.attention_probe_seq_len, cfg.attention_pad_fraction (else the default).
  static AttentionProbeOptions from(const TrainingConfig& cfg, bool corrupt_masked);
};

// The probe's inputs in each dtype on the device and their float64 host references, built once:
// the references are the probe's whole host cost (at seq 8192 about a TFLOP in float64), so a
// check that probes again reuses them and pays only for the kernels.
struct PreparedAttentionProbe {
  struct Case {
    torch::ScalarType dtype;
    const char* name;
    torch::Tensor q{}, k{}, v{};   // rounded to `dtype`, on the device
    torch::Tensor reference[2]{};  // float64 on the host: [0] causal only, [1] with the padding mask
    double bound[2] = {0.0, 0.0};  // attention_bound(..) * max|V|, per mask
    double v_max = 0.0;
  };
  torch::Device device{torch::kCPU};
  int64_t seq = 0, head_dim = 0;
  double pad_fraction = kProbePadFraction;
  torch::Tensor causal, padded;  // the allowed-key masks on the device
  std::vector<Case> cases;       // one per dtype
};
PreparedAttentionProbe prepare_attention_probe(const AttentionInputs& inputs, const torch::Device& device,
                                               const AttentionProbeOptions& options);
// Every backend x dtype x mask x V layout on the prepared inputs; a combination the build or
// device has no kernel for is reported unsupported, not failed.
std::vector<AttentionProbeResult> run_attention_probe(const PreparedAttentionProbe& prepared, bool corrupt_masked);
// Both at once.
std::vector<AttentionProbeResult> probe_attention(const AttentionInputs& inputs, const torch::Device& device,
                                                  const AttentionProbeOptions& options);

// The probe on the trainer's model: block 0's inputs for the first kProbeSequences sequences of
// the first training batch, prepared, and the kernel libtorch serves the training call with:
// which fused kernel (AOTriton/CK on ROCm) a run validates and pays for, or "math" when none
// takes the call (its cost is the explicit path's).
struct TrainerProbeInputs {
  PreparedAttentionProbe prepared;
  std::string training_kernel;  // CausalSelfAttentionImpl::training_kernel in the run's precision
};
TrainerProbeInputs prepare_trainer_attention_probe(LoopAccess& loop);
struct TrainerAttentionProbe {
  std::vector<AttentionProbeResult> results;
  std::string training_kernel;
};
TrainerAttentionProbe probe_trainer_attention(LoopAccess& loop, bool corrupt_masked);

// The kernel of block 0's training call, captured from a forward of the first batch's first
// sequence (the choice follows dtypes, strides, head size, mask and dropout, not the batch) and
// cast to the run's precision as autocast casts it: CausalSelfAttentionImpl::training_kernel.
std::string training_attention_kernel(LoopAccess& loop);

// `rocm-conformance-llm probe attention`: {"probe", "device", "libtorch", "seq_len",
// "pad_fraction", "backends", "training_kernel", "results": [AttentionProbeResult::to_json],
// "mismatches", "passed"}.
nlohmann::json attention_probe_report(LoopAccess& loop, const TrainerAttentionProbe& probe);

// Loop-side: the probe at start-up (preflight) and every training.attention_probe_interval
// steps, always on the inputs start-up prepared (block 0's Q/K/V under the initial weights):
// a later probe runs the kernels only, and one that disagrees with its float64 reference where
// it agreed before changed on the same inputs. A mismatch is a fail finding
// attention_backend_mismatch, once per combination per run.
class AttentionProbeCheck final : public Detector {
 public:
  AttentionProbeCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop, const FaultPlan* faults);
  void preflight() override;
  void between_steps(int64_t step) override;

 private:
  void probe(int64_t step, int rank);

  LoopAccess& loop_;
  const FaultPlan* faults_;
  std::optional<TrainerProbeInputs> inputs_;  // prepared at the first probe
  std::set<std::string> reported_;
};

}  // namespace rcl
