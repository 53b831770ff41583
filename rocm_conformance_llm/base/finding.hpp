// A finding: one failure signature seen, attributed to a ROCm component. The vocabulary every
// layer reports in (a collective that failed, a check, a checkpoint's saved findings); what a
// signature's registry entry adds (default action, cap) is checks/findings/finding_log.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

enum class Severity { info, warn, fail };

// What a person does next about a finding (README "Actions"; in the spirit of DCGM's
// severity-to-action taxonomy). Stable report.json values.
enum class Action {
  rerun,            // transient: run the validation again
  isolate_node,     // persistent on this node: drain it, hand it to hardware triage
  report_upstream,  // a reproducible library result: file it against the ROCm component
  check_config,     // configuration: a precision limit or a setting of the job or the node
  none,             // information only
};

// How a re-run of the anomalous step judged it (checks/findings/rerun_outcome.hpp, docs/detectors.md).
enum class Classification {
  transient,      // not reproduced when the step ran again on the same device
  persistent,     // reproduced on this device in higher precision, not on the CPU (or CPU not run)
  precision,      // reproduced in the training precision, gone in float32/float64
  configuration,  // reproduced on the CPU too: the job itself does it, not the device
};

// Component names are stable: they are JUnit test-case names and report.json values.
namespace component {
inline constexpr const char* rocblas = "rocBLAS/hipBLASLt";
inline constexpr const char* rocrand = "rocRAND";
inline constexpr const char* rccl = "RCCL";
inline constexpr const char* allocator = "ROCr allocator";
inline constexpr const char* miopen = "MIOpen";
inline constexpr const char* hip_runtime = "HIP runtime";
// The fused SDPA kernels (AOTriton flash / memory-efficient, CK flash on ROCm).
inline constexpr const char* attention = "AOTriton/CK attention";
inline constexpr const char* all[] = {rocblas, rocrand, rccl, allocator, miopen, hip_runtime, attention};
// Not a ROCm component: the machine the run shares with other processes. A finding about it
// explains an anomaly that is no component's fault, and changes no component's status.
inline constexpr const char* host = "host";
// Not a ROCm component either: the training job's own settings (learning rate, warm-up,
// initialisation for the model's size). Its findings are the job's to fix (check_config), and
// change no component's status.
inline constexpr const char* training = "training configuration";
}  // namespace component

struct Finding {
  std::string component;  // one of component::all
  std::string signature;  // short stable id, e.g. "nonfinite_loss", "memory_leak"
  Severity severity = Severity::warn;
  int64_t step = 0;
  int rank = 0;
  std::string message;  // one human-readable line
  nlohmann::json evidence = nlohmann::json::object();
  // Unset: from the classification, else the signature's registered default (action_of).
  std::optional<Action> action = std::nullopt;
  std::optional<Classification> classification = std::nullopt;  // unset: the anomaly was not re-run
  // Unset: not checked. reproducible: again on a re-run on the same device; also_in_fp32: again
  // with the step re-run in float32 (or float64); also_on_cpu: again with it re-run on the CPU.
  std::optional<bool> reproducible = std::nullopt, also_in_fp32 = std::nullopt, also_on_cpu = std::nullopt;
};

std::string to_string(Severity s);
Severity severity_from_string(const std::string& s);  // ConfigError on unknown
std::string to_string(Action a);
Action action_from_string(const std::string& s);  // ConfigError on unknown
std::string to_string(Classification c);
Classification classification_from_string(const std::string& s);  // ConfigError on unknown
// A double for evidence: JSON has no NaN/Inf, so those become the strings "nan", "inf", "-inf".
nlohmann::json json_number(double v);

// Reads what to_json (checks/findings/finding_log.hpp) wrote (a previous run's report.json); ConfigError
// on a malformed entry.
Finding finding_from_json(const nlohmann::json& j);

}  // namespace rcl
