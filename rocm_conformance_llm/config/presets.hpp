// The presets: named base training configs with the stress intensities that fit their scale.
#pragma once

#include <string>
#include <vector>

#include "rocm_conformance_llm/config/fields.hpp"
#include "rocm_conformance_llm/config/stress_profile.hpp"

namespace rcl {

// A preset: a base training config and the stress intensities that fit its scale.
struct Preset {
  std::string name;
  std::string description;
  TrainingConfig training;
  StressProfile stress;
};

const std::vector<Preset>& presets();
const Preset& find_preset(const std::string& name);  // ConfigError listing known names
// `smoke` on CPU; `small` when a GPU is present.
std::string default_preset_name(bool gpu_present);

}  // namespace rcl
