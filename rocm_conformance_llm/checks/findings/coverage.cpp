#include "rocm_conformance_llm/checks/findings/coverage.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/checks/findings/detector_spec.hpp"

namespace rcl {

namespace {
bool targets(const std::vector<std::string>& components, const std::string& component) {
  return std::find(components.begin(), components.end(), component) != components.end();
}

void append(std::string& text, const std::string& part) {
  if (!part.empty()) text += (text.empty() ? "" : "; ") + part;
}

// Why the checks that target `component` did not run, and which stress mode for it was skipped.
std::string why_unchecked(const RunCoverage& run, const std::string& component) {
  std::string idle;
  for (const auto& c : run.checks)
    if (!c.ran && targets(c.components, component))
      idle += fmt::format("{}{}: {}", idle.empty() ? "" : ", ", c.check, c.reason);
  return idle.empty() ? "no check targeting it was registered" : "no check targeting it ran (" + idle + ")";
}

std::string skipped_modes_of(const RunCoverage& run, const std::string& component) {
  std::string text;
  for (const auto& m : run.skipped_modes)
    if (targets(m.components, component)) append(text, fmt::format("stress mode '{}' skipped: {}", m.mode, m.reason));
  return text;
}

// Why the checks that ran did not reach `component`'s ROCm library; empty when they did.
std::string why_not_reached(const RunCoverage& run, const std::string& component) {
  if (component == component::rccl) {
    if (run.world_size < 2) return "one rank: no collective crossed ranks";
    // c10d's NCCL group: RCCL on a ROCm build, NCCL on a CUDA one (the same collectives on another
    // vendor's GPUs, as the other components count any GPU); Gloo checks only the tool.
    if (run.collective_backend == "rccl" || run.collective_backend == "nccl") return {};
    const std::string backend = run.collective_backend == "gloo" ? "Gloo" : run.collective_backend;
    return fmt::format("collectives ran over {} across {} ranks, not RCCL", backend, run.world_size);
  }
  if (!run.gpu) return fmt::format("{} device: no ROCm library ran", run.device == "cpu" ? "CPU" : run.device);
  return {};
}
}  // namespace

void RunCoverage::record(const DetectorSpec& spec, bool ran, std::string reason) {
  CheckCoverage entry{spec.name, components_of(spec), ran, ran ? std::string() : std::move(reason)};
  const auto same =
      std::find_if(checks.begin(), checks.end(), [&](const CheckCoverage& c) { return c.check == spec.name; });
  if (same != checks.end()) *same = std::move(entry);
  else checks.push_back(std::move(entry));
}

std::vector<std::string> components_of(const DetectorSpec& spec) {
  std::vector<std::string> out;
  for (const char* component : component::all)
    for (const auto& signature : spec.signatures)
      if (signature.component == component) {
        out.emplace_back(component);
        break;
      }
  return out;
}

std::vector<ComponentCoverage> component_coverage(const RunCoverage& run, int64_t steps) {
  std::vector<ComponentCoverage> out;
  for (const char* name : component::all) {
    ComponentCoverage c{.component = name};
    for (const auto& check : run.checks)
      if (check.ran && targets(check.components, name)) c.checks.push_back(check.check);
    if (!run.diagnostics_enabled) c.reason = "diagnostics disabled: no check ran";
    else if (steps <= 0) c.reason = "no training step finished";
    else if (c.checks.empty()) c.reason = why_unchecked(run, name);
    else c.reason = why_not_reached(run, name);
    c.exercised = c.reason.empty();
    // A skipped mode explains a component left unexercised; one the base workload reached stays so.
    if (!c.exercised) append(c.reason, skipped_modes_of(run, name));
    out.push_back(std::move(c));
  }
  return out;
}

nlohmann::json to_json(const RunCoverage& run, const std::vector<ComponentCoverage>& components, int64_t steps) {
  nlohmann::json checks = nlohmann::json::array(), modes = nlohmann::json::array(),
                 per_component = nlohmann::json::array();
  for (const auto& c : run.checks) {
    nlohmann::json entry = {{"check", c.check},
                            {"components", c.components},
                            {"ran", c.ran},
                            {"steps", c.ran ? steps : 0},
                            {"device", run.device}};
    if (!c.ran) entry["reason"] = c.reason;
    checks.push_back(std::move(entry));
  }
  for (const auto& m : run.skipped_modes)
    modes.push_back({{"mode", m.mode}, {"components", m.components}, {"reason", m.reason}});
  for (const auto& c : components)
    per_component.push_back(
        {{"component", c.component}, {"exercised", c.exercised}, {"reason", c.reason}, {"checks", c.checks}});
  return {{"device", run.device},
          {"gpu", run.gpu},
          {"world_size", run.world_size},
          {"collective_backend", run.collective_backend},
          {"diagnostics_enabled", run.diagnostics_enabled},
          {"steps", steps},
          {"checks", checks},
          {"stress_modes_skipped", modes},
          {"components", per_component}};
}

}  // namespace rcl
