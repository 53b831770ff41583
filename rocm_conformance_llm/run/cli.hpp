// The command line: flags -> a fully resolved RunConfig (preset, then --level, then config file,
// then --set overrides and dedicated flags, then stress modes), validated before anything runs.
// The flags are defined in cli.cpp, resolved and refused in cli_resolve.cpp, printed in cli_print.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/reports/compare.hpp"
#include "rocm_conformance_llm/run/run_config.hpp"

namespace rcl {

struct CliOptions {
  std::optional<std::string> stress;  // raw --stress text, when given
  std::string preset;
  std::optional<int64_t> steps;
  std::optional<uint64_t> seed;
  std::string device;
  std::string precision;
  std::string data;
  std::string output_dir;
  std::string config_file;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  std::string inject;
  std::optional<double> watchdog_timeout_s;
  std::string baseline_dir;
  std::string duration;             // --duration: 90s, 30m, 8h
  std::string checkpoint_interval;  // --checkpoint-interval: steps or a duration
  std::optional<int64_t> keep_checkpoints;
  std::string resume;  // --resume DIR | latest
  bool print_config = false;
  bool explain_stress = false;
  bool explain_step = false;
  bool list_stress = false;
  bool help_config = false;
  bool markdown = false;  // --list-stress / --help-config as markdown tables
  bool overwrite = false;
  std::optional<int> level;  // --level 1..4
  bool memory_profile = false;
  std::string device_memory;                 // --device-memory: pose a device of this capacity
  std::optional<double> device_peak_tflops;  // --device-peak-tflops: its measured peak
  bool ocp_stdout = false;
  // `rocm-conformance-llm doctor`
  bool doctor = false;
  bool doctor_json = false;
  std::string doctor_cmdline = "/proc/cmdline";
  std::string doctor_kfd_topology = "/sys/class/kfd/kfd/topology/nodes";
};

// Parses argv. Returns std::nullopt after printing help or a usage error; `exit_code` says which.
std::optional<CliOptions> parse_cli(int argc, const char* const* argv, int& exit_code);

// `rocm-conformance-llm compare ...`: argv starts at "compare". Returns std::nullopt after
// printing help or a usage error; `exit_code` says which.
std::optional<CompareOptions> parse_compare_cli(int argc, const char* const* argv, int& exit_code);

// Applies the resolution order; throws ConfigError on any invalid input, and on a composition
// the device (or, on the CPU, the host) cannot hold (the fit's one-line reason) unless the options only print the
// config or explain the stress (those show the refusal; `refusal` then gives the line).
RunConfig resolve_run_config(const CliOptions& options, bool gpu_present);

// The combinations only the launch can refuse, before anything is written: they depend on the
// world size and the fault plan. ConfigError naming the key and what is allowed.
void check_for_world(const RunConfig& run, int world_size, const FaultPlan& faults);

// The fit's refusal when the resolved run does not fit its device (or a CPU run the host's
// free memory), else "".
std::string refusal(const RunConfig& run);

// The `rocm` section alone, which no preset or device changes: main applies these knobs before
// the first HIP call (asking whether a GPU is present is one). Same errors as resolve_run_config.
RocmConfig resolve_rocm_config(const CliOptions& options);

// {"preset", "stress_modes", "stress_skipped", "training", "base_training", "stress_changes",
//  "stress_profile", "diagnostics", "rocm", "level", "inject", "baseline", "output_dir", "checkpoint",
//  "fit", "sizing"} ("fit": null where no device was fitted; "sizing": the predicted peak and FLOPs
//  of the config that runs, docs/sizing.md). Not a CPU run's host_memory: the host's free memory
//  changes from one call to the next, and this document must not (config.json records it).
nlohmann::json to_json(const RunConfig& run);
// config.json's "sizing" for `model`: run.training, or the model a parallel layout trains.
nlohmann::json sizing_json(const RunConfig& run, const TrainingConfig& model);

// Console text for --explain-stress.
std::string explain_text(const RunConfig& run);

// `--help-config`: every key (training.*, stress_profile.*.*, diagnostics.*, rocm.*) with its type,
// default, allowed values and meaning; `markdown` gives the table in docs/configuration.md.
std::string help_config_text(bool markdown);

}  // namespace rcl
