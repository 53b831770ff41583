// The run levels (`--level N`): time-boxed bundles over a preset, apart from the presets because
// they patch a preset by name rather than define a model.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

// A run level (`--level N`, as RVS's and DCGM's `-r`): a time-boxed bundle of preset, stress
// modes, duration and check intervals. It sits between the preset and the config file, so the
// file, --set, --stress and the dedicated flags all win over it (docs/levels.md).
struct RunLevel {
  int level = 0;
  std::string name;
  std::string description;
  std::string preset;        // empty: the device's default preset
  std::string stress_modes;  // --stress syntax; empty: none
  nlohmann::json patch;      // {"training": {...}, "diagnostics": {...}} over the preset
};
const std::vector<RunLevel>& run_levels();
const RunLevel& find_run_level(int level);  // ConfigError naming the known levels

}  // namespace rcl
