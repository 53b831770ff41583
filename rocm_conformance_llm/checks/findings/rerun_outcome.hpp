// Transient or persistent: what running an anomalous computation again says about a finding.
// Every check that re-runs what it caught (the anomaly re-run, the GEMM canary, the shadow
// check, the replay) classifies its finding with these rules (docs/detectors.md, "Re-running an
// anomaly").
#pragma once

#include <map>
#include <optional>
#include <string>

#include "rocm_conformance_llm/base/finding.hpp"

namespace rcl {

// What the re-runs of one anomalous step saw. Unset: that re-run was not made.
struct RerunOutcome {
  bool reproducible = false;                        // again when re-run on the same device, same precision
  std::optional<bool> also_in_fp32 = std::nullopt;  // again with autocast off (float32 compute)
  std::optional<bool> also_on_cpu = std::nullopt;   // again on the CPU (never on a CPU run: the device is the CPU)
};

// transient: not reproduced; precision: reproduced, gone in float32; configuration: also on
// the CPU (two BLAS implementations agree, so the job computes it); persistent: otherwise.
Classification classify(const RerunOutcome& outcome);

// Writes the outcome and its classification into `f`.
void record_outcome(Finding& f, const RerunOutcome& outcome);
// record_outcome, and says so in the message. A classification other than persistent
// caps the severity at warn: the step computed differently when run again, or the device
// computes what the job asks for; the finding stays in the report with its action.
void apply_rerun(Finding& f, const RerunOutcome& outcome);

// One rank's transients per signature. The first is a one-off (apply_rerun: warn, action
// rerun); another of the same signature in the same run is an intermittent fault, not a one-off:
// it keeps the detector's severity and points at the node (action isolate_node), as the README's
// action table says a repeated `rerun` means.
class TransientHistory {
 public:
  // apply_rerun, then that escalation.
  void apply(Finding& f, const RerunOutcome& outcome);

 private:
  std::map<std::string, int> seen_;
};

}  // namespace rcl
