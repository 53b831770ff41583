// GEMM shape canaries (rocBLAS/hipBLASLt): the model's own GEMM shapes run on the training
// device in the training dtype and are compared with a float64 CPU reference. Wrong results
// for specific shapes (split-K paths that leave outputs unwritten, dropped stores past an
// offset, a bad TunableOp pick) show up here as a shape and an error, not as a vague loss blip.
//
// Inputs are standard normal, drawn from the canary's own generator (the training RNG stream is
// untouched) and rounded to the dtype; the reference multiplies those rounded values in
// float64, so only the GEMM's own error is measured. Tolerances, with u = unit roundoff of the
// output dtype (fp32 2^-24, fp16 2^-11, bf16 2^-8) and u_acc = 2^-24 (fp32 accumulation, which
// PyTorch requests for every dtype; TF32/xf32 must be off, PyTorch's default):
//   relative Frobenius error  ||C - R||_F / ||R||_F        <= 8 u + 32 u_acc sqrt(K)
//   worst element             max |C - R| / rms(R)          <= 16 u + 64 u_acc sqrt(K)
// Honest rounding gives about u/sqrt(3) and u*max|R|/rms(R) (~5u for a million outputs), so
// these leave a 3-10x margin, while one wrong row of a 256-row output already costs 1/16
// relative error. "Finite in, non-finite out" is checked separately and always fails. A device
// seen to sum a dtype in the dtype itself (gemm_sums_in_float32) has that dtype's shapes
// reported unsupported: its honest error would be outside these tolerances.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"
#include "rocm_conformance_llm/config.hpp"

namespace rcl {

class FaultPlan;
class LoopAccess;

// C (M x N) = op(A) (M x K) * op(B) (K x N). transpose_a: A is stored K x M and used through a
// transposed view (a BLAS "T" operand); likewise B, stored N x K, which is what nn::Linear does.
struct CanaryShape {
  std::string label;
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  torch::ScalarType dtype = torch::kFloat;
  std::string to_string() const;  // "ffn_up 512x1024x256 NT bf16"
};

struct GemmTolerance {
  double relative_fro = 0.0;
  double max_elementwise = 0.0;  // in units of rms(reference)
};
GemmTolerance gemm_tolerance(torch::ScalarType dtype, int64_t k);
// fp64 2^-53, fp32 2^-24, fp16 2^-11, bf16 2^-8; std::invalid_argument for other dtypes.
double unit_roundoff(torch::ScalarType dtype);

// fp32 -> kFloat, bf16 -> kBFloat16, fp16 -> kHalf.
torch::ScalarType precision_dtype(Precision mixed_precision);

// The forward and weight-gradient GEMMs of the configured model (QKV, attention output, FFN
// up/down, LM head, FFN weight gradient) in the training dtype. M (tokens) is capped at 1024 and
// the LM head's N at 8192 so the float64 reference stays cheap on the host.
std::vector<CanaryShape> model_gemm_shapes(const TrainingConfig& cfg);
// Shapes from public bug reports (rocm-libraries#9055: bf16 546x9728x2560 TN returned NaN).
// About 27 GFLOP of float64 reference each: meant for GPU runs.
std::vector<CanaryShape> known_issue_gemm_shapes();

struct GemmCanaryResult {
  CanaryShape shape;
  // false: the device has no kernel for this dtype (fp16 GEMM on libtorch 1.13's CPU), or sums
  // it in the dtype itself (gemm_sums_in_float32, checks/detectors/shadow_bound.hpp)
  bool supported = true;
  bool nonfinite_output = false;
  double relative_fro_error = 0.0;
  double max_elementwise_error = 0.0;
  GemmTolerance tolerance;
  bool passed() const;
};

// Judges one GEMM output (any device, any dtype) against its float64 reference.
GemmCanaryResult judge_gemm_output(const CanaryShape& shape, const torch::Tensor& output,
                                   const torch::Tensor& reference);

// The injected faults (gemm-corrupt, gemm-corrupt-once): the first shape's output loses its
// last row, as a GEMM that dropped its stores would; `once` spares the re-run, `persistent` not.
enum class CanaryFault { none, once, persistent };

class GemmCanary {
 public:
  // Draws the inputs and computes the float64 references once.
  GemmCanary(std::vector<CanaryShape> shapes, const torch::Device& device, uint64_t seed = 0xC0FFEE);

  // Runs every shape on the device. A bad shape is run again: on the device (reproducible?),
  // in fp32 when its dtype is bf16/fp16, on the CPU when the device is a GPU, and classified as
  // every re-run anomaly is (rerun_outcome.hpp): gemm_nonfinite_output or gemm_wrong_result (component
  // rocBLAS/hipBLASLt), fail when it reproduces (once per shape per run of the program), warn
  // for a one-off transient, fail again for a second transient (intermittent).
  std::vector<GemmCanaryResult> run(int64_t step, int rank, FindingLog& log, CanaryFault fault = CanaryFault::none);

 private:
  struct Case {
    CanaryShape shape;
    torch::Tensor a, b;       // on the device, in the dtype, stored as the shape says
    torch::Tensor reference;  // CPU float64, M x N
  };
  // Whether the shape's product, computed on `device` in `dtype`, is wrong again.
  bool wrong_again(const Case& c, const torch::Device& device, torch::ScalarType dtype, bool corrupt) const;

  torch::Device device_;
  std::vector<Case> cases_;
  std::set<std::pair<size_t, std::string>> reported_;  // reproducible ones: reported once
  TransientHistory transients_;
};

// Loop-side: the canary every diagnostics.gemm_canary_interval steps, after the step (outside
// its time), on the model's own shapes; on a GPU also the shapes of public bug reports (each
// costs ~27 GFLOP of float64 reference on the host, too much for a CPU run).
class GemmCanaryCheck final : public Detector {
 public:
  // `faults`: gemm-corrupt and gemm-corrupt-once corrupt a canary output (nullptr: no faults).
  GemmCanaryCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop, const FaultPlan* faults);
  void between_steps(int64_t step) override;

 private:
  LoopAccess& loop_;
  const FaultPlan* faults_;
  GemmCanary canary_;
};

}  // namespace rcl
