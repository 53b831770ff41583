// --baseline DIR: this run against a previous run of the same configuration. Differences become
// findings: loss trajectory (rocBLAS/hipBLASLt numerics), step time and the per-step op
// fingerprint (MIOpen: performance and kernel-count regressions), peak memory (ROCr allocator),
// and any failure signature present now but not then (its own component).
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"

namespace rcl {

struct RunRecord {
  std::vector<StepPoint> steps;
  std::vector<Finding> findings;
  nlohmann::json config;  // the run's config snapshot ({"training": ..., "diagnostics": ...})
};

// Reads DIR/metrics.jsonl (rank 0's steps; a truncated last line from a crashed run is
// skipped), DIR/report.json's findings and config when present, else DIR/config.json.
// ConfigError when DIR has no readable metrics.jsonl.
RunRecord load_run_record(const std::filesystem::path& dir);

// Inverse of logging.hpp's to_json(StepRecord) for the fields a comparison reads (a null loss,
// which is how JSON stores NaN, reads back as NaN).
StepRecord step_record_from_metrics_json(const nlohmann::json& j);

struct BaselineComparison {
  std::vector<Finding> findings;
  nlohmann::json summary;  // the report's "baseline" section
};

// Signatures:
//   loss_mismatch_vs_baseline (rocBLAS/hipBLASLt): first common step whose loss differs; bitwise
//     when both runs are deterministic (fail), else beyond baseline_loss_rel_tolerance (warn).
//   step_time_regression_vs_baseline (MIOpen, warn): post-warm-up median ratio >=
//     slowdown_ratio_warn.
//   op_fingerprint_changed (MIOpen, warn): first common step whose op counts differ.
//   peak_memory_regression_vs_baseline (ROCr allocator, warn): peak grew by more than
//     baseline_memory_growth_ratio (same memory figure only).
//   new_finding_vs_baseline (the finding's component, warn): a (component, signature) that the
//     baseline did not have.
// When the training configs differ (other than run length and logging knobs) nothing is
// compared: summary.comparable is false and lists the differing keys.
BaselineComparison compare_with_baseline(const RunRecord& now, const RunRecord& then, const DiagnosticsConfig& cfg,
                                         int rank);

}  // namespace rcl
