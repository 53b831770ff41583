// The verdict and the reports: a per-component table on the console, report.json and
// junit.xml, written atomically, also from an exception handler or the watchdog's callback so a
// crashed or hung run still leaves what was known.
//
// Exit codes (base/errors.hpp's ExitCode):
//   0 (kExitClean)        completed; no fail-severity finding (warnings allowed)
//   1 (kExitFailFinding)  completed, or stopped, with at least one fail-severity finding
//   2 (kExitUsage)        usage or configuration error (ConfigError before the run; no report)
//   3 (kExitCrashOrHang)  crashed (an exception escaped the loop) or hung (watchdog fired)
//   4 (kExitInterrupted)  interrupted by a stop signal (run/signals.hpp)
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/findings/coverage.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"
#include "rocm_conformance_llm/reports/training_collectives.hpp"

namespace rcl {

enum class RunOutcome { completed, crashed, hung, interrupted };
std::string to_string(RunOutcome o);

struct ComponentStatus {
  std::string component;
  // "FAIL" / "WARN" from its findings (on any device: a finding is a finding), else "PASS" when
  // a check exercised it, else "NOT_RUN" (checks/findings/coverage.hpp).
  std::string status;
  int info = 0, warn = 0, fail = 0;
  bool exercised = false;
  std::string reason;               // why it was not exercised; empty when it was
  std::vector<std::string> checks;  // the checks targeting it that ran
};
// Every component of component::all, in that order, even those with no finding. A component
// missing from `coverage` was not exercised.
std::vector<ComponentStatus> component_statuses(const std::vector<Finding>& findings,
                                                const std::vector<ComponentCoverage>& coverage);
// The components a check exercised, and the sentence the verdict adds when there are none.
std::vector<std::string> exercised_components(const std::vector<ComponentStatus>& statuses);
std::string coverage_sentence(const std::vector<ComponentStatus>& statuses);

struct Verdict {
  std::string status;  // "PASS" | "WARN" | "FAIL" | "CRASHED" | "HUNG" | "INTERRUPTED"
  int exit_code = 0;
};
Verdict verdict_for(const std::vector<Finding>& findings, RunOutcome outcome);

// The table, one row per component (NOT_RUN rows with their reason), then the verdict line and
// coverage_sentence.
std::string format_component_table(const std::vector<ComponentStatus>& statuses, const Verdict& v);

// XML 1.0 text/attribute escaping; characters XML cannot carry become '?'.
std::string xml_escape(std::string_view text);
// What junit.xml's testsuite says of where and when it ran.
struct JunitRun {
  double duration_s = 0;
  std::string timestamp;  // ISO 8601, UTC: when the run started
  std::string hostname;
  nlohmann::json identity = nullptr;  // report.json's `identity`: a property each (world rank, host, ...)
};
// One testsuite: one testcase per component (a <failure> holding every fail finding, warnings
// and infos in <system-out>, <skipped> with the reason for a NOT_RUN one), then one per check
// that ran (classname rocm-conformance-llm.check; a <failure> for its fail findings).
std::string junit_xml(const std::vector<Finding>& findings, const std::vector<ComponentStatus>& statuses,
                      const std::vector<std::string>& checks_ran, const Verdict& v, const JunitRun& run);

class ReportWriter {
 public:
  // `config_snapshot`: the resolved run configuration (run/cli.hpp's to_json(RunConfig)).
  ReportWriter(std::filesystem::path output_dir, int rank, nlohmann::json config_snapshot, nlohmann::json environment,
               FindingLog& findings, const RunSummary& summary, int64_t warmup_steps);

  // Extra top-level sections, e.g. "baseline" (the --baseline comparison), "faults".
  void add_section(const std::string& key, nlohmann::json value);
  // Also print ocp.jsonl's lines on stdout when the verdict is written (--ocp-stdout).
  void print_ocp_to_stdout() { ocp_to_stdout_ = true; }
  // What the run exercised (the "coverage" section, each component's PASS or NOT_RUN); until
  // set, nothing was.
  void set_coverage(RunCoverage coverage);
  // The training's collectives, read when the report is written (a crash's or a hang's too) into
  // `collectives.training`, beside the battery's keys; no key while the table is empty.
  void set_training_collectives(const TrainingCollectives& table);
  // Called once, by the call that wrote the verdict, after its files and outside the writer's
  // lock (the job report waits on other ranks through the store, bounded by the collective timeout).
  using AfterWrite = std::function<void(const Verdict&, const std::vector<Finding>&)>;
  void set_after_write(AfterWrite after) { after_write_ = std::move(after); }

  // Writes report.json and junit.xml (report.rank<N>.json / junit.rank<N>.xml off rank 0), then
  // report.html, the final metrics.prom and ocp.jsonl (reports/ocp_output.hpp) beside them, and logs the component
  // table; returns the exit code. Thread-safe and first-call-wins: once a verdict is written (say the watchdog's
  // "hung"), later calls return its exit code unchanged. When the files cannot be written it logs why and returns
  // kExitCrashOrHang.
  int write(RunOutcome outcome, const std::string& note = {});

  // For a catch block: classifies `what` (error_classifier.hpp) into a fail finding for the
  // step after the last finished one, adds it to the log, and writes a "crashed" report.
  int write_crash(std::string_view what, const std::string& phase);

  const std::filesystem::path& report_path() const { return report_path_; }

 private:
  // write()'s files, under its lock; the exit code (kExitCrashOrHang when they cannot be written).
  int write_locked(RunOutcome outcome, const std::string& note, const std::vector<Finding>& findings,
                   const Verdict& verdict);
  // report.html, metrics.prom and ocp.jsonl: views of the verdict; failing to write them is
  // logged, the verdict stands.
  void write_views(const nlohmann::json& report, const std::vector<Finding>& findings, const Verdict& verdict,
                   const std::vector<ComponentStatus>& statuses);

  const std::filesystem::path report_path_, junit_path_, html_path_, metrics_path_, prom_path_, ocp_path_;
  const std::string run_name_;
  const int rank_;
  const nlohmann::json config_, environment_;
  FindingLog& findings_;
  const RunSummary& summary_;
  const int64_t warmup_steps_;
  const std::chrono::steady_clock::time_point started_;
  const std::chrono::system_clock::time_point started_at_;
  std::mutex mutex_;
  nlohmann::json sections_ = nlohmann::json::object();
  RunCoverage coverage_;
  const TrainingCollectives* training_collectives_ = nullptr;
  bool ocp_to_stdout_ = false;
  std::optional<int> written_exit_code_;
  AfterWrite after_write_;
};

}  // namespace rcl
