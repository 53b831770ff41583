#include "rocm_conformance_llm/run/explain_step.hpp"

#include <fmt/format.h>

namespace rcl {
namespace {

// The names of the parts acting at `point`, in the trainer's order, or "-".
std::string acting_at(HookPoint point, const std::vector<RunWiring::Attachment>& parts) {
  std::string names;
  for (const auto& part : parts)
    if (part.points.test(size_t(point))) names += (names.empty() ? "" : ", ") + part.name;
  return names.empty() ? "-" : names;
}

}  // namespace

std::string explain_step_text(const std::string& heading, const std::vector<RunWiring::Attachment>& parts) {
  std::string out = heading + "\n";
  out += "A step, top to bottom; at each point the parts that act there, in the order they are called.\n";
  out += fmt::format("At every phase (on_phase): {}\n\n", acting_at(HookPoint::phase, parts));
  bool in_micro_batches = false;
  for (const ScheduleLine& line : step_schedule()) {
    if (line.depth == 1 && !in_micro_batches) out += "for each micro-batch:\n";
    in_micro_batches = line.depth == 1;
    const std::string indent(2 + 2 * line.depth, ' ');
    if (!line.point) {
      out += fmt::format("{}[{}] {}\n", indent, line.what, line.when);
      continue;
    }
    out += fmt::format("{}{}: {}\n{}    -> {}\n", indent, line.what, line.when, indent, acting_at(*line.point, parts));
  }
  return out;
}

}  // namespace rcl
