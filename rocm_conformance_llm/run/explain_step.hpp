// --explain-step: what runs at which point of a step for the resolved run, printed from the
// step's schedule (loop/step_hooks.hpp: step_schedule) and the parts the run attaches, in the
// wiring's order (run/wiring.hpp): the order the trainer calls them.
#pragma once

#include <string>
#include <vector>

#include "rocm_conformance_llm/run/wiring.hpp"

namespace rcl {

// `heading`: the run in a line (preset, modes, world, device). `parts`: RunWiring::in_order().
std::string explain_step_text(const std::string& heading, const std::vector<RunWiring::Attachment>& parts);

}  // namespace rcl
