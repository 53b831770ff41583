// Stress modes: pure, composable mutators of a TrainingConfig.
//
// Why composition is order-independent: every mode only raises a field to at least its
// intensity, lowers it to at most, or switches a feature on, and no two modes touch the same
// field (each declares its fields; tests check both). Such mutators commute, and applying one
// twice changes nothing, so `--stress a,b` == `--stress b,a` == `--stress a,a,b`.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

struct StressMode {
  std::string name;
  std::string targets;                      // the ROCm components it stresses
  std::string summary;                      // one line: what it changes
  std::vector<std::string> declared_fields; // the only TrainingConfig fields apply() may change
  std::function<TrainingConfig(const TrainingConfig&, const StressProfile&)> apply;
};

// Every known mode, in canonical order (gemm, rng, comm, memory, fusion).
const std::vector<StressMode>& stress_mode_registry();
std::vector<std::string> stress_mode_names();

// Parses `--stress` text: comma list, `all` = every mode, duplicates ignored, whitespace
// tolerated. Unknown or empty names are ConfigErrors listing the known modes. The result is
// in canonical order, so it is also the order shown in logs.
std::vector<std::string> parse_stress_list(const std::string& text);

// Applies the named modes to `base` in the order given (any order gives the same result).
TrainingConfig compose_stress_modes(const TrainingConfig& base, const std::vector<std::string>& modes,
                                    const StressProfile& profile);

// Field-by-field changes: {field: [before, after]} for fields that differ.
nlohmann::json config_diff(const TrainingConfig& before, const TrainingConfig& after);

// What each mode changed from `base`: {mode: {field: [before, after]}}.
nlohmann::json explain_stress(const TrainingConfig& base, const std::vector<std::string>& modes,
                              const StressProfile& profile);

}  // namespace rcl
