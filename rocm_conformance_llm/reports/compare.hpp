// `rocm-conformance-llm compare RUN_DIR...`: many runs of one configuration (one per node, one
// per ROCm release) side by side, each judged against the group (or a baseline written from
// good runs): a console table, compare.json and compare.html, and an exit code for CI.
// The rules are data (a small JSON file overlaying the defaults): docs/compare.md.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

struct CompareOptions {
  std::vector<std::string> run_dirs;  // directories, or quoted globs expanded here
  std::string rules_file;             // empty: the defaults
  std::string baseline_in;            // --baseline FILE: judge against it instead of the group
  std::string baseline_out;           // --baseline-out FILE: write one from these runs
  std::string output_dir = ".";       // where compare.json and compare.html go
};

// A figure of a run judged against a reference median: flagged when it is worse than `ratio` x
// the median (below for "lower", above for "higher") AND its robust z (MAD-scaled) is beyond
// `robust_z`, so neither a tight group's rounding noise nor a noisy group's spread alone flags.
struct MetricRule {
  std::string metric;  // tokens_per_s | step_time_p50_s | step_time_p95_s | peak_memory_bytes | final_loss
  std::string worse;   // "lower" | "higher"
  double ratio = 1.0;
  double robust_z = 3.5;
};

struct CompareRules {
  std::vector<MetricRule> metrics;
  bool fail_finding = true;           // any fail-severity finding
  bool warn_finding = false;          // any warning
  bool not_completed = true;          // crashed, hung, interrupted, or no report at all
  bool loss_bitwise_majority = true;  // loss trajectory differs from the bitwise majority of its config
  bool op_fingerprint_majority = true;
};
CompareRules default_compare_rules();
// The defaults overlaid with FILE's keys (a "metrics" list replaces rules metric by metric);
// ConfigError naming the bad key or value.
CompareRules load_compare_rules(const std::filesystem::path& file);
nlohmann::json to_json(const CompareRules& rules);

// One run as compare reads it from its directory.
struct RunRow {
  std::string dir, name;
  std::string verdict = "NO REPORT", outcome = "none";
  int exit_code = -1;
  int info = 0, warn = 0, fail = 0;
  std::vector<std::string> fail_findings;  // "component signature@step"
  std::map<std::string, double> metrics;   // the MetricRule names; NaN when the run has none
  std::string loss_trajectory;             // hash of every step's loss bits ("" without steps)
  std::string op_fingerprint;              // hash of the fingerprinted steps' op counts ("" if none)
  std::string config;                      // hash of the training config: groups for the majority rules
  std::vector<std::string> flags;          // why it is flagged; empty: ok
};

// ConfigError when `dir` is not a run directory (no report.json and no config.json).
RunRow load_run_row(const std::filesystem::path& dir);

// The reference each run is judged against: per metric median, MAD and count; per config the
// majority loss trajectory and op fingerprint. From the group, or read from a baseline file.
struct CompareReference {
  std::string source;  // "group" | the baseline file
  struct Stat {
    double median = 0, mad = 0;
    size_t n = 0;
  };
  std::map<std::string, Stat> metrics;
  std::map<std::string, std::string> loss_trajectory, op_fingerprint;  // config -> majority hash
};
CompareReference group_reference(const std::vector<RunRow>& rows);
// The baseline file: the reference plus, per metric, the range the rules allow ("expected").
nlohmann::json baseline_json(const CompareReference& ref, const CompareRules& rules, const std::vector<RunRow>& rows);
CompareReference reference_from_baseline(const nlohmann::json& baseline, const std::string& source);

// Fills each row's flags.
void judge_runs(std::vector<RunRow>& rows, const CompareRules& rules, const CompareReference& ref);

std::string compare_table(const std::vector<RunRow>& rows);
nlohmann::json compare_json(const std::vector<RunRow>& rows, const CompareRules& rules, const CompareReference& ref);
std::string compare_html(const std::vector<RunRow>& rows, const CompareRules& rules, const CompareReference& ref);

// The whole command: 0 no run flagged, 1 some run flagged (or --baseline-out refused because
// of one), 2 bad input (thrown as ConfigError).
int run_compare(const CompareOptions& options);

}  // namespace rcl
