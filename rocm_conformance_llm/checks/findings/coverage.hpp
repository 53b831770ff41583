// What a run exercised: which checks ran, on which device, over which collective backend, and
// which stress modes were skipped. A component without a finding is PASS only when a check that
// targets it (a registry entry with a signature of that component) watched steps on a GPU, or,
// for RCCL, collectives crossed at least two ranks through RCCL/NCCL: a CPU run exercises the
// tool, not rocBLAS, and Gloo is not RCCL (docs/outputs.md "coverage").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

struct DetectorSpec;

struct CheckCoverage {
  std::string check;                    // the registry entry's name
  std::vector<std::string> components;  // those its signatures name
  bool ran = false;
  std::string reason;  // why it did not run; empty when it ran
};

struct SkippedModeCoverage {
  std::string mode;
  std::vector<std::string> components;  // the stress mode's targets
  std::string reason;                   // the capability it lacked
};

struct RunCoverage {
  std::string device = "cpu";  // libtorch's device type ("cuda" for ROCm's HIP devices)
  bool gpu = false;
  int world_size = 1;
  std::string collective_backend;  // "gloo" | "rccl" | "nccl" (c10d's NCCL group on a CUDA build); empty on one rank
  bool diagnostics_enabled = true;
  std::vector<CheckCoverage> checks;
  std::vector<SkippedModeCoverage> skipped_modes;

  // Records `spec` as run, or not with `reason`; a later record of the same check replaces it.
  // The runner's own checks pass their catalog entry (checks/detectors/catalog.hpp registered_detector).
  void record(const DetectorSpec& spec, bool ran, std::string reason = {});
};

// One component's coverage: exercised, or why not.
struct ComponentCoverage {
  std::string component;
  bool exercised = false;
  std::string reason{};               // empty when exercised
  std::vector<std::string> checks{};  // the checks targeting it that ran
};

// For every component of component::all, in that order. `steps`: steps the run finished (the
// checks that ran watched each of them).
std::vector<ComponentCoverage> component_coverage(const RunCoverage& run, int64_t steps);

// The components a registry entry targets: those its signatures name, in component::all order.
std::vector<std::string> components_of(const DetectorSpec& spec);

// report.json's "coverage" section.
nlohmann::json to_json(const RunCoverage& run, const std::vector<ComponentCoverage>& components, int64_t steps);

}  // namespace rcl
