// metrics.prom: the run's state in the Prometheus text exposition format, rewritten atomically
// (temp + rename, the node exporter's textfile-collector convention) every
// diagnostics.prom_interval steps and once more with the verdict, so a cluster dashboard picks a
// run up by pointing the collector's --collector.textfile.directory at (a link to) the file.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"

namespace rcl {

struct PromState {
  std::string run;  // the `run` label: the output directory's name
  int rank = 0;
  std::optional<StepPoint> last_step;  // none before the first step
  std::vector<Finding> findings;
  std::optional<Verdict> verdict;                // set once the run has ended
  std::vector<ComponentStatus> components = {};  // set once the run has ended
};

// A label value as the format wants it: \\, \" and \n escaped.
std::string prom_label_value(std::string_view text);

// Gauges, each with labels run and rank: rcl_step, rcl_loss, rcl_tokens_per_second,
// rcl_step_time_seconds, rcl_memory_bytes{figure}, rcl_findings{component,severity} (every
// component and severity, zeros included), rcl_run_finished, rcl_last_update_timestamp_seconds;
// at the end rcl_verdict{verdict} (1 for the verdict, 0 for the others), rcl_exit_code and
// rcl_component_status{component,status} (1 for each component's status, 0 for the others).
std::string prometheus_text(const PromState& state);

// The `run` label: the output directory's own name ("runs/node07/" -> "node07").
std::string prom_run_name(const std::filesystem::path& output_dir);

// metrics.prom on rank 0, metrics.rank<N>.prom elsewhere.
std::filesystem::path prom_path(const std::filesystem::path& output_dir, int rank);

// Rewrites the file every `interval` steps (0: never; the report writes the final one).
class PrometheusObserver final : public StepObserver {
 public:
  PrometheusObserver(const std::filesystem::path& output_dir, int rank, int64_t interval, const FindingLog& findings);
  void on_step(const StepRecord& r) override;

 private:
  const std::filesystem::path path_;
  const std::string run_;
  const int rank_;
  const int64_t interval_;
  const FindingLog& findings_;
};

}  // namespace rcl
