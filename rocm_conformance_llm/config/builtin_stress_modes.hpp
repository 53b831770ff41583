// The built-in stress modes' rule table, which the registry (stress_modes.cpp) starts from; apart
// because it is data, each mode's rules with the reasons they stress what they stress.
#pragma once

#include <vector>

#include "rocm_conformance_llm/stress_modes.hpp"

namespace rcl {

// In canonical order: the order `--stress all` applies and lists them.
std::vector<StressMode> builtin_stress_modes();

}  // namespace rcl
