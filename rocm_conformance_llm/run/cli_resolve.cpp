// Flags -> RunConfig: the resolution order (preset, level, config file, --set, dedicated flags,
// stress modes, the fit) and the refusals, apart from the flag definitions (run/cli.cpp) and what
// a resolved run prints (run/cli_print.cpp).
#include "rocm_conformance_llm/run/cli.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"

namespace rcl {

namespace {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read --config '" + path + "': no such file or not readable");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError("invalid --config '" + path + "': not valid JSON (" + e.what() + ")");
  }
}

std::string stress_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string text;
    for (const auto& item : value) {
      if (!item.is_string()) throw ConfigError("invalid config 'stress_modes': expected a list of names");
      if (!text.empty()) text += ",";
      text += item.get<std::string>();
    }
    return text;
  }
  throw ConfigError("invalid config 'stress_modes': expected a string or a list of names");
}

std::string default_output_dir(const std::string& preset) {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  return "runs/" + preset + "-" + stamp;
}

}  // namespace

namespace {

// A config file's top level: what resolve() reads, and what to_json(RunConfig) and config.json
// add for the record (a run's config.json repeats it), which is ignored. Anything else is a typo.
constexpr const char* kConfigFileKeys[] = {"preset",      "stress_modes", "training", "stress_profile",
                                           "diagnostics", "rocm",         "inject"};
constexpr const char* kConfigRecordKeys[] = {
    "stress_skipped",     "base_training", "stress_changes", "baseline", "output_dir", "world_size", "launcher",
    "environment",        "checkpoint",    "level",          "doctor",   "rocm_knobs", "fit",        "sizing",
    "collective_backend", "host_memory",   "network",        "attention_backend_requested", "attention_kernel",
    "reduced_precision_gemm"};

// The sections a config file, a level and --set overlay onto a preset.
constexpr const char* kConfigSections[] = {"training", "stress_profile", "diagnostics", "rocm"};

void check_top_level_keys(const nlohmann::json& file, const std::string& path) {
  for (const auto& item : file.items()) {
    const std::string& key = item.key();
    if (std::ranges::find(kConfigFileKeys, key) != std::end(kConfigFileKeys) ||
        std::ranges::find(kConfigRecordKeys, key) != std::end(kConfigRecordKeys))
      continue;
    throw ConfigError(
        fmt::format("invalid --config '{}': unknown key '{}' (known: {}; ignored as the record of a "
                    "run: {})",
                    path, key, fmt::join(std::begin(kConfigFileKeys), std::end(kConfigFileKeys), ", "),
                    fmt::join(std::begin(kConfigRecordKeys), std::end(kConfigRecordKeys), ", ")));
  }
}

nlohmann::json read_config_file(const CliOptions& o) {
  if (o.config_file.empty()) return nlohmann::json::object();
  nlohmann::json file = read_json_file(o.config_file);
  if (!file.is_object()) throw ConfigError("invalid --config '" + o.config_file + "': expected a JSON object");
  check_top_level_keys(file, o.config_file);
  return file;
}

// Overlays the level's bundle, then the file's sections, then --set onto `doc` (strictly:
// unknown keys are errors).
void overlay_sections(nlohmann::json& doc, const CliOptions& o, const nlohmann::json& file) {
  if (o.level) merge_json_strict(doc, find_run_level(*o.level).patch, "");
  nlohmann::json file_patch = nlohmann::json::object();
  for (const char* section : kConfigSections)
    if (file.contains(section)) file_patch[section] = file.at(section);
  merge_json_strict(doc, file_patch, "");
  for (const auto& assignment : o.overrides) apply_override(doc, assignment);
}

nlohmann::json sections_of(const Preset& preset) {
  return {{"training", preset.training},
          {"stress_profile", complete_stress_profile(preset.stress)},
          {"diagnostics", DiagnosticsConfig{}},
          {"rocm", RocmConfig{}}};
}

RocmConfig rocm_of(const nlohmann::json& doc) { return parse_rocm_config(doc.at("rocm")); }

// The dedicated flags win over everything the sections hold; they are checked with the keys
// they set.
void apply_dedicated_flags(nlohmann::json& doc, const CliOptions& o) {
  nlohmann::json& training = doc.at("training");
  if (o.steps) training["steps"] = *o.steps;
  if (o.seed) training["seed"] = *o.seed;
  if (!o.device.empty()) training["device"] = o.device;
  if (!o.precision.empty()) training["mixed_precision"] = o.precision;
  if (!o.data.empty()) training["data_path"] = o.data;
  if (!o.duration.empty()) training["max_duration_s"] = parse_duration_s("--duration", o.duration);
  nlohmann::json& diagnostics = doc.at("diagnostics");
  if (o.watchdog_timeout_s) diagnostics["watchdog_timeout_s"] = *o.watchdog_timeout_s;
  if (o.memory_profile) diagnostics["memory_profile"] = true;
}

// The device a run's config is fitted to: the one --device-memory poses, else the GPU's own
// memory; none for a CPU run (the host's memory is shared with everything else it runs, and
// swaps rather than failing) or where the capacity cannot be read.
std::optional<DeviceDescription> device_to_fit(const CliOptions& o, const RunConfig& run) {
  const double peak_flops = o.device_peak_tflops.value_or(0.0) * 1e12;
  if (!o.device_memory.empty())
    return DeviceDescription{.name = "--device-memory " + o.device_memory,
                             .capacity_bytes = parse_byte_size("--device-memory", o.device_memory),
                             .peak_flops = peak_flops};
  if (!run.capabilities.gpu) return std::nullopt;
  const auto capacity = gpu_memory_bytes(detect_launch().local_rank);
  if (!capacity) return std::nullopt;
  return DeviceDescription{.name = "the GPU's memory", .capacity_bytes = *capacity, .peak_flops = peak_flops};
}

RunConfig resolve(const CliOptions& o, bool gpu_present) {
  const nlohmann::json file = read_config_file(o);
  const RunLevel* level = o.level ? &find_run_level(*o.level) : nullptr;

  // 1. Preset: --preset, then the file's, then the level's, then by device.
  RunConfig run;
  run.level = o.level.value_or(0);
  const bool cpu_only = o.device == "cpu" || !gpu_present;
  run.preset = !o.preset.empty()                 ? o.preset
               : file.contains("preset")         ? file.at("preset").get<std::string>()
               : level && !level->preset.empty() ? level->preset
                                                 : default_preset_name(!cpu_only);
  const Preset& preset = find_preset(run.preset);

  // 2. The level, the file, then --set overrides overlay the preset.
  nlohmann::json doc = sections_of(preset);
  overlay_sections(doc, o, file);
  try {
    run.stress_profile = complete_stress_profile(doc.at("stress_profile").get<StressProfile>());
    run.rocm = rocm_of(doc);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("invalid config: ") + e.what());
  }

  // 3. Dedicated flags win over everything above; then each section is checked and read.
  apply_dedicated_flags(doc, o);
  run.base = parse_training_config(doc.at("training"));
  validate(run.stress_profile);
  run.diagnostics = parse_diagnostics_config(doc.at("diagnostics"));

  // 4. Stress modes mutate the validated base.
  if (o.stress) {
    run.stress_modes = parse_stress_list(*o.stress);
  } else if (file.contains("stress_modes")) {
    const std::string listed = stress_text(file.at("stress_modes"));
    if (!listed.empty()) run.stress_modes = parse_stress_list(listed);
  } else if (level && !level->stress_modes.empty()) {
    run.stress_modes = parse_stress_list(level->stress_modes);
  }
  // A device posed by --device-memory is a GPU: the modes compose for it as they would there.
  run.capabilities = Capabilities::of_this_build(!cpu_only || !o.device_memory.empty());
  // `auto` becomes the backend this device runs in the precision the modes leave, once, before the
  // modes, the fit, validation and the model read it; config.json records both.
  run.attention_backend_requested = run.base.attention_backend;
  run.base = with_attention_resolved(run.base, run.stress_modes, run.stress_profile, run.capabilities);
  auto composed = compose_stress_modes(run.base, run.stress_modes, run.stress_profile, run.capabilities);
  run.training = composed.training;
  run.stress_skipped = std::move(composed.skipped);
  try {
    validate(run.training);
  } catch (const ConfigError& e) {
    // Composition preserves validity by construction (and tests prove it); reaching here
    // means a profile intensity combined badly with the base.
    throw ConfigError(std::string("stress modes produced an invalid config: ") + e.what());
  }

  // 5. The composed config fitted to the device (docs/sizing.md).
  if (const auto device = device_to_fit(o, run)) {
    run.fit = fit_to_device(run.training, *device);
    run.training = run.fit->training;
    validate(run.training);
    if (!run.fit->fits && !o.print_config && !o.explain_stress) throw ConfigError(run.fit->reason);
  }
  // 6. A CPU run is not fitted, but one the host cannot hold is refused as a GPU's is: it would
  // start, fail to allocate and crash. Its ranks share the host (as configure_cpu_threads takes them).
  if (!run.fit && !run.capabilities.gpu)
    if (const auto host = host_available_memory()) {
      run.host_memory =
          check_host_memory(run.training, detect_launch().world_size, host->available_bytes, host->source);
      if (!run.host_memory->fits && !o.print_config && !o.explain_stress) throw ConfigError(run.host_memory->reason);
    }

  run.inject = !o.inject.empty() ? o.inject : file.value("inject", std::string());
  run.baseline_dir = o.baseline_dir;
  run.output_dir = !o.output_dir.empty() ? o.output_dir : default_output_dir(run.preset);
  run.checkpoint_interval = o.checkpoint_interval;
  run.checkpoint = parse_checkpoint_policy(o.checkpoint_interval, o.keep_checkpoints.value_or(CheckpointPolicy{}.keep));
  run.resume = o.resume;
  run.ocp_stdout = o.ocp_stdout;
  run.measured_peak_tflops = o.device_peak_tflops.value_or(0.0);
  if ((run.resume == "latest" || run.resume == kResumeAuto) && o.output_dir.empty())
    throw ConfigError("--resume " + run.resume +
                      " needs --output-dir (the run directory whose newest checkpoint to continue)");
  return run;
}
}  // namespace

RunConfig resolve_run_config(const CliOptions& options, bool gpu_present) {
  try {
    return resolve(options, gpu_present);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("invalid config: ") + e.what());
  }
}

RocmConfig resolve_rocm_config(const CliOptions& options) {
  try {
    // Any preset: the overlay checks keys and types only, which no preset changes.
    nlohmann::json doc = sections_of(presets().front());
    overlay_sections(doc, options, read_config_file(options));
    return rocm_of(doc);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("invalid config: ") + e.what());
  }
}

void check_for_world(const RunConfig& run, int world_size, const FaultPlan& faults) {
  const TrainingConfig& cfg = run.training;
  if (cfg.data_parallel != DataParallel::fsdp || world_size <= 1) return;
  // The nan fault writes into block 0's gathered weight, which under FSDP exists only inside the
  // block's own forward.
  if (faults.requested(FaultKind::nan))
    throw ConfigError(
        "invalid --inject nan with training.data_parallel 'fsdp' on several ranks: the weight it "
        "strikes is not resident between blocks; allowed there: the other faults, or data_parallel "
        "ddp, zero");
  // FSDP's units are whole dense blocks: the layout fits a tensor split by keeping the model
  // whole (recorded), but experts the user asked for cannot be dropped silently.
  if (cfg.moe_experts > 0)
    throw ConfigError(
        fmt::format("invalid training.data_parallel 'fsdp' with moe_experts={}: fsdp shards dense "
                    "blocks only; allowed: fsdp with moe_experts=0, or data_parallel ddp, zero",
                    cfg.moe_experts));
}

std::string refusal(const RunConfig& run) {
  if (run.fit && !run.fit->fits) return run.fit->reason;
  if (run.host_memory && !run.host_memory->fits) return run.host_memory->reason;
  return "";
}

CheckpointPolicy parse_checkpoint_policy(const std::string& interval, int64_t keep) {
  if (keep < 1) throw ConfigError(fmt::format("invalid --keep-checkpoints '{}': must be an integer >= 1", keep));
  CheckpointPolicy p;
  p.keep = keep;
  if (interval.empty()) return p;
  if (const auto steps = parse_number<int64_t>(interval)) {
    if (*steps < 1)
      throw ConfigError(fmt::format("invalid --checkpoint-interval '{}': a step count must be >= 1", interval));
    p.every_steps = *steps;
  } else {
    p.every_s = parse_duration_s("--checkpoint-interval", interval);
  }
  return p;
}

}  // namespace rcl
