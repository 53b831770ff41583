// Checksum check (rocBLAS/hipBLASLt): every GEMM of the step, the forward's and the backward's
// (attention projections, MLP, experts, LM head; dX and dW of each), judged in the step it runs
// against its row and column checksums (algorithm-based fault tolerance: for C = A B, C x must
// equal A (B x) and yᵀ C must equal (yᵀ A) B; two matrix-vector products per GEMM, O(MK + KN + MN)
// against the GEMM's O(MNK)). Silent data corruption, a GPU returning wrong numbers without an
// error, strikes one call, one shape or one unit; the shadow check (shadow_check.hpp) recomputes one
// forward op a step in float64, so a corruption waits for its turn there, and a one-off one is
// missed. The bound is the shadow check's (shadow_bound.hpp), for each row and for each column, so
// a mismatch names the row and column the corruption is in.
//
// The GEMMs reach the check through workload/gemm_checks.hpp, armed from the step's start until its
// gradients are final. diagnostics.gemm_checksums: all (every call), rotating
// (gemm_checksums_per_step distinct GEMMs a step, in turn), off. On the CPU a call is judged at
// once, in plain loops over the operands; on a GPU by ATen ops on the device, and the step's
// verdicts reach the host in one copy a step later: no host read in an ordinary step.
//
// Re-run: a mismatching GEMM is judged again at its next call (the next step's, whatever
// gemm_checksums says): wrong again is persistent, right is a transient (rerun_outcome.hpp).
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/gemm_checks.hpp"

namespace rcl {

class LoopAccess;

// Loop-side: see the top of this file. Findings: gemm_checksum_mismatch (fail).
class GemmChecksumCheck final : public Detector, private GemmObserver {
 public:
  GemmChecksumCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop);
  void on_step_begin(int64_t step) override;
  void on_gradients(int64_t step, const std::vector<torch::Tensor>& params, const torch::Tensor& loss_sum,
                    int64_t first_micro_batch) override;
  void finish() override;
  // "gemm_checksums": what was judged (calls, distinct GEMMs) and the largest clean ratio seen.
  nlohmann::json report_sections() const override;

 private:
  // One judged call.
  struct Checked {
    std::string name;  // GemmCall::name
    const char* site = "";
    int64_t layer = -1;
    GemmPass pass = GemmPass::forward;
    std::array<int64_t, 3> shape{};  // M, K, N
    std::string dtype;
    std::string device;  // "cuda:0" (the HIP device on ROCm), "cpu"
  };
  // One step's calls and their verdicts (GemmChecksums: [row ratio, row, column ratio, column, judged]).
  struct StepVerdicts {
    int64_t step = 0;
    std::vector<Checked> calls;
    std::vector<std::array<double, 5>> on_host;  // CPU: decided at once
    std::vector<torch::Tensor> on_device_parts;  // GPU: until the step's gradients are final
    std::optional<DeferredScalars> on_device;    // then one copy, read a step later
  };
  // A mismatch waiting for its GEMM's next call.
  struct Suspect {
    std::string name;
    Finding finding;
  };

  void observe_gemm(const GemmCall& call) override;
  bool wants(const std::string& name);
  void read_verdicts();
  void judge(const StepVerdicts& step, const std::vector<std::array<double, 5>>& verdicts);
  void report_suspect(Suspect suspect, std::optional<bool> wrong_again);

  LoopAccess& loop_;
  std::mutex mutex_;  // a GPU backward's GEMMs arrive on libtorch's device thread
  std::optional<ObservedGemms> armed_;
  std::optional<StepVerdicts> current_, pending_;
  std::vector<std::string> names_;  // distinct GEMMs in the order first seen (rotating)
  size_t rotation_start_ = 0, known_at_step_start_ = 0;
  std::set<std::string> recheck_;  // names judged again at their next call, whatever the rotation
  std::optional<Suspect> suspect_;
  int64_t calls_judged_ = 0;
  double worst_clean_ratio_ = 0.0;  // the margin clean GEMMs kept below the bound
  TransientHistory transients_;
};

}  // namespace rcl
