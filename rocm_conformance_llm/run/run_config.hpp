// A run as resolved from the command line (run/cli.hpp does the resolving): the configuration
// every later stage of the run reads, and nothing of how it was parsed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/workload/fit.hpp"

namespace rcl {

// When to write: every N steps ("500") or every duration ("30m"), and how many to keep.
struct CheckpointPolicy {
  int64_t every_steps = 0;  // 0: not by steps
  double every_s = 0;       // 0: not by time
  int64_t keep = 2;
  bool periodic() const { return every_steps > 0 || every_s > 0; }
};
// `--checkpoint-interval` text: a step count, or a duration (parse_duration_s). ConfigError.
CheckpointPolicy parse_checkpoint_policy(const std::string& interval, int64_t keep);

// `--resume auto`: the newest checkpoint under --output-dir if there is one, else a fresh start.
inline constexpr const char* kResumeAuto = "auto";

struct RunConfig {
  std::string preset;
  std::vector<std::string> stress_modes;              // canonical order
  TrainingConfig base;                                // before stress modes
  TrainingConfig training;                            // after stress modes: what runs
  AttentionBackend attention_backend_requested{};     // as configured: `auto` (which `base` holds resolved) or a name
  StressProfile stress_profile;                       // every registered intensity
  Capabilities capabilities;                          // what stress modes may require of this run
  std::map<std::string, std::string> stress_skipped;  // mode -> why it changed nothing
  std::optional<DeviceFit> fit;                       // the composed config fitted to the device; `training`
                                                      // is its result. None on the CPU unless a device is posed
  std::optional<HostMemoryCheck> host_memory;         // a CPU run's predicted peak against the host's free memory
  DiagnosticsConfig diagnostics;
  RocmConfig rocm;
  int level = 0;  // 0: no --level
  std::string inject;
  std::string baseline_dir;
  std::string output_dir;
  std::string checkpoint_interval;  // as given; `checkpoint` is what it means
  CheckpointPolicy checkpoint;
  std::string resume;       // as given; resolved and verified when the run starts
  bool ocp_stdout = false;  // --ocp-stdout: rank 0 prints ocp.jsonl on stdout at the end
  double measured_peak_tflops = 0;  // --device-peak-tflops: the report's MFU is also stated against it (0: none)
};

}  // namespace rcl
