#include "rocm_conformance_llm/run/cli.hpp"

#include <cmath>
#include <functional>
#include <iostream>

#include <CLI/CLI.hpp>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"

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
  app.add_option(
      "--data", o.data,
      "Text or JSONL file, an indexed dataset PREFIX, or a blend \"W1 PREFIX1 W2 PREFIX2 ...\" (docs/data.md; "
      "default: the embedded synthetic corpus)");
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
  auto* peak_flag =
      app.add_option("--device-peak-tflops", peak_tflops,
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

}  // namespace rcl
