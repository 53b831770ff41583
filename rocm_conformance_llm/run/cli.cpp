#include "rocm_conformance_llm/run/cli.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"

namespace rcl {

namespace {
// CLI11's parse, then `after` (reads the flags' texts): false after printing the help (exit 0)
// or a usage error (exit 2), one line pointing at `help`.
bool parse_args(
    CLI::App& app, int argc, const char* const* argv, const char* help, int& exit_code,
    const std::function<void()>& after = [] {}) {
  try {
    app.parse(argc, argv);
    after();
    return true;
  } catch (const ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    exit_code = kExitClean;
    return false;
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (see " << help << ")\n";
  }
  exit_code = kExitUsage;
  return false;
}
}  // namespace

std::optional<CliOptions> parse_cli(int argc, const char* const* argv, int& exit_code) {
  CliOptions o;
  CLI::App app{
      "rocm-conformance-llm: validate a ROCm software stack by training a real decoder "
      "Transformer under composable stress modes"};
  std::string stress, peak_tflops;
  auto* stress_flag =
      app.add_option("--stress", stress, "Stress modes: comma list of " + join(stress_mode_names(), ",") + " or 'all'");
  app.add_option("--preset", o.preset,
                 "Scale preset: smoke, cpu-medium, small, large (default: smoke on "
                 "CPU, small on GPU)");
  std::string steps, seed;
  auto* steps_flag = app.add_option("--steps", steps, "Optimizer steps")->type_name("INT");
  auto* seed_flag = app.add_option("--seed", seed, "Seed for init, data order and dropout")->type_name("UINT");
  app.add_option("--device", o.device, "auto | cpu | gpu");
  app.add_option("--precision", o.precision, "fp32 | bf16 | fp16 (gemm mode raises fp32 to its precision)");
  app.add_option("--data", o.data, "Text or JSONL file (default: the embedded synthetic corpus)");
  app.add_option("--output-dir", o.output_dir, "Where config.json, metrics.jsonl, report.json, junit.xml go");
  app.add_option("--config", o.config_file, "JSON config file (same shape as --print-config output)");
  app.add_option("--set", o.overrides,
                 "Override a field: KEY=VALUE (training field, or "
                 "stress_profile.MODE.FIELD / diagnostics.FIELD); repeatable");
  app.add_option("--inject", o.inject, "Fault injection, e.g. nan@step=20,memory-leak=8MiB/step");
  app.add_option("--watchdog-timeout", o.watchdog_timeout_s,
                 "Seconds without a finished step before the "
                 "run is declared hung");
  app.add_option("--baseline", o.baseline_dir, "A previous run's output dir to compare against");
  app.add_option("--duration", o.duration,
                 "Time box: stop at the first step boundary after this long, e.g. 90s, "
                 "30m, 8h (sets max_duration_s; --steps still bounds the run)");
  app.add_option("--checkpoint-interval", o.checkpoint_interval,
                 "Write a checkpoint every N steps, or every duration (e.g. 30m); also at the end and on a stop "
                 "signal (docs/checkpoints.md)");
  std::string keep;
  auto* keep_flag = app.add_option("--keep-checkpoints", keep, "Checkpoints kept (default 2)")->type_name("INT");
  app.add_option("--resume", o.resume,
                 "Continue from a checkpoint: its directory, a run directory (its newest), "
                 "'latest' (the newest under --output-dir), or 'auto' (the newest under "
                 "--output-dir if there is one, else start fresh: one command to start and "
                 "restart)");
  app.add_flag("--print-config", o.print_config, "Print the resolved config as JSON and exit");
  app.add_flag("--explain-stress", o.explain_stress, "Print what each stress mode changes and exit");
  app.add_flag("--explain-step", o.explain_step,
               "Print which check, fault and output acts at which point of a step for this run, and exit");
  app.add_flag("--list-stress", o.list_stress, "List stress modes, their ROCm targets and rules and exit");
  app.add_flag("--help-config", o.help_config,
               "List every config key (type, default, allowed values, meaning) "
               "and exit");
  app.add_flag("--markdown", o.markdown, "With --list-stress or --help-config: markdown tables (as in docs/)");
  app.add_flag("--overwrite", o.overwrite, "Allow writing into an output dir that holds a previous run");
  std::string level;
  auto* level_flag = app.add_option("--level", level,
                                    "Run level: 1 quick CI gate (~2 min), 2 standard, 3 extended, "
                                    "4 soak; explicit flags and keys win (docs/levels.md)")
                         ->type_name("1|2|3|4");
  app.add_option("--device-memory", o.device_memory,
                 "Fit the stressed config to a device of this memory, e.g. 80GB, 192GB (default: the GPU's own; "
                 "no fit on the CPU)")
      ->type_name("SIZE");
  auto* peak_flag = app.add_option("--device-peak-tflops", peak_tflops,
                                   "The device's measured dense peak in the run's precision: the predicted ideal step time, "
                                   "and the report's MFU against it (docs/performance.md)")
                        ->type_name("TFLOPS");
  app.add_flag("--ocp-stdout", o.ocp_stdout,
               "Also print ocp.jsonl (OCP Test and Validation output, "
               "docs/outputs.md) on stdout when the run ends");
  app.add_flag("--memory-profile", o.memory_profile,
               "Memory after model creation, on the device, after step 1 "
               "and at peak, in report.json");
  auto* doctor = app.add_subcommand("doctor",
                                    "Check this node's ROCm environment: a PASS/WARN/FAIL line per check "
                                    "(docs/doctor.md); exit 1 when a check fails");
  doctor->add_flag("--json", o.doctor_json, "Print the checks as JSON");
  doctor->add_option("--proc-cmdline", o.doctor_cmdline, "Kernel command line file (default /proc/cmdline)");
  doctor->add_option("--kfd-topology", o.doctor_kfd_topology,
                     "KFD topology nodes directory (default /sys/class/kfd/kfd/topology/nodes)");
  app.footer("Compare runs: rocm-conformance-llm compare RUN_DIR... (see compare --help)");
  // CLI11's integer conversion clamps out-of-range text (strtoll) and wraps "-1" into an unsigned
  // seed: the integer flags are read as text and parsed here, whole and in range.
  const bool parsed = parse_args(app, argc, argv, "--help", exit_code, [&] {
    o.doctor = doctor->parsed();
    if (level_flag->count() > 0) o.level = find_run_level(parse_integer<int>("--level", level)).level;
    if (stress_flag->count() > 0) o.stress = stress;
    if (steps_flag->count() > 0) o.steps = parse_integer<int64_t>("--steps", steps);
    if (seed_flag->count() > 0) o.seed = parse_integer<uint64_t>("--seed", seed);
    if (keep_flag->count() > 0) o.keep_checkpoints = parse_integer<int64_t>("--keep-checkpoints", keep);
    if (peak_flag->count() > 0) {
      const auto tflops = parse_number<double>(peak_tflops);
      if (!tflops || !std::isfinite(*tflops) || *tflops <= 0)
        throw ConfigError("invalid --device-peak-tflops '" + peak_tflops + "': must be a number > 0 (TFLOP/s)");
      o.device_peak_tflops = *tflops;
    }
    if (!o.device_memory.empty()) parse_byte_size("--device-memory", o.device_memory);
  });
  return parsed ? std::optional(o) : std::nullopt;
}

std::optional<CompareOptions> parse_compare_cli(int argc, const char* const* argv, int& exit_code) {
  CompareOptions o;
  CLI::App app{
      "rocm-conformance-llm compare: runs of one configuration side by side, each judged against the "
      "group's median (or a baseline); exit code 0 none flagged, 1 some flagged, 2 bad input",
      "rocm-conformance-llm compare"};
  app.add_option("runs", o.run_dirs, "Run directories (or quoted globs)")->required()->type_name("RUN_DIR");
  app.add_option("--rules", o.rules_file, "JSON rule file overlaying the defaults (docs/compare.md)");
  app.add_option("--baseline", o.baseline_in, "Judge against this baseline file instead of the group");
  app.add_option("--baseline-out", o.baseline_out,
                 "Write a baseline (expected ranges) from these runs when none "
                 "is flagged");
  app.add_option("--output-dir", o.output_dir, "Where compare.json and compare.html go (default: .)");
  return parse_args(app, argc, argv, "compare --help", exit_code) ? std::optional(o) : std::nullopt;
}

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
      text += (text.empty() ? "" : ",") + item.get<std::string>();
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

// What the sizing model assumes where no device was fitted: the host (no allocator slack), or a
// GPU whose capacity could not be read.
DeviceDescription host_device(const RunConfig& run) {
  return {.name = run.capabilities.gpu ? "a GPU of unknown memory" : "the host", .accelerator = run.capabilities.gpu};
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
  // `auto` becomes the backend this device runs, once, before the modes, the fit, validation and
  // the model read it; config.json records both.
  run.attention_backend_requested = run.base.attention_backend;
  run.base.attention_backend = resolve_attention_backend(run.base.attention_backend, run.capabilities);
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
