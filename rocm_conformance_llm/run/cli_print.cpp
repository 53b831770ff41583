// What a resolved run shows: config.json's document (--print-config), the --explain-stress text
// and the --help-config table; apart from the resolution (run/cli_resolve.cpp), which they only read.
#include "rocm_conformance_llm/run/cli.hpp"

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/workload/sizing.hpp"

namespace rcl {
namespace {

// What the sizing model assumes where no device was fitted: the host (no allocator slack), or a
// GPU whose capacity could not be read.
DeviceDescription host_device(const RunConfig& run) {
  return {.name = run.capabilities.gpu ? "a GPU of unknown memory" : "the host", .accelerator = run.capabilities.gpu};
}

}  // namespace

nlohmann::json to_json(const RunConfig& run) {
  return {
      {"preset", run.preset},
      {"stress_modes", run.stress_modes},
      {"stress_skipped", run.stress_skipped},
      {"training", run.training},
      {"attention_backend_requested", run.attention_backend_requested},
      {"base_training", run.base},
      {"stress_changes", explain_stress(run.base, run.stress_modes, run.stress_profile, run.capabilities)},
      {"stress_profile", run.stress_profile},
      {"diagnostics", run.diagnostics},
      {"rocm", run.rocm},
      {"level", run.level},
      {"inject", run.inject},
      {"baseline", run.baseline_dir},
      {"output_dir", run.output_dir},
      {"checkpoint", {{"interval", run.checkpoint_interval}, {"keep", run.checkpoint.keep}, {"resume", run.resume}}},
      {"fit", run.fit ? run.fit->to_json() : nlohmann::json(nullptr)},
      {"sizing", sizing_json(run, run.training)}};
}

nlohmann::json sizing_json(const RunConfig& run, const TrainingConfig& model) {
  return predict_step(model, run.fit ? run.fit->device : host_device(run)).to_json();
}

std::string explain_text(const RunConfig& run) {
  std::string out =
      fmt::format("preset {}; stress modes: {}\n", run.preset,
                  run.stress_modes.empty() ? "none" : fmt::format("{}", fmt::join(run.stress_modes, ",")));
  const auto changes = explain_stress(run.base, run.stress_modes, run.stress_profile, run.capabilities);
  for (const auto& mode : run.stress_modes) {
    if (const auto skipped = run.stress_skipped.find(mode); skipped != run.stress_skipped.end()) {
      out += fmt::format("  {}: skipped ({})\n", mode, skipped->second);
      continue;
    }
    const auto& fields = changes.at(mode);
    if (fields.empty()) out += fmt::format("  {}: no change (base already at or beyond its intensity)\n", mode);
    for (const auto& [field, change] : fields.items())
      out += fmt::format("  {:<7} {:<26} {} -> {}\n", mode, field, change[0].dump(), change[1].dump());
  }
  if (!run.fit) {
    out += "  fit: none (no device to fit: a CPU run; --device-memory poses one)\n";
    return run.host_memory ? out + "  host memory: " + run.host_memory->reason + "\n" : out;
  }
  for (const auto& [field, change] : run.fit->changes.items())
    out += fmt::format("  {:<7} {:<26} {} -> {}\n", "fit", field, change[0].dump(), change[1].dump());
  if (!run.fit->fits) return out + "  fit: " + run.fit->reason + "\n";
  return out + fmt::format("  fit: {} ({} bytes, {})\n", run.fit->reason, run.fit->device.capacity_bytes,
                           run.fit->device.name);
}

std::string help_config_text(bool markdown) {
  const std::string training = describe_fields(training_fields(), "training", markdown);
  const std::string stress = describe_stress_intensities(markdown);
  const std::string diagnostics = describe_fields(diagnostics_fields(), "diagnostics", markdown);
  const std::string rocm = describe_fields(rocm_fields(), "rocm", markdown);
  if (markdown)
    return "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n" + training + stress + diagnostics +
           rocm;
  return "Config keys, for --set KEY=VALUE (training keys also bare) and --config files. Defaults are the\n"
         "built-in ones; presets change many (--print-config shows a run's values).\n\n" +
         training + "\n" + stress + "\n" + diagnostics + "\n" + rocm;
}

}  // namespace rcl
