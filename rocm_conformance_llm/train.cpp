// Entry point: parse the command line, resolve the configuration, run the job.
#include <iostream>
#include <string>

#include "rocm_conformance_llm/cli.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/runner.hpp"

int main(int argc, char** argv) {
  using namespace rcl;
  try {
    int exit_code = kExitClean;
    // `probe attention [flags]`: the same flags as a run, the probe alone.
    const bool probe = argc > 1 && std::string(argv[1]) == "probe";
    if (probe && (argc < 3 || std::string(argv[2]) != "attention")) {
      std::cerr << "error: invalid probe '" << (argc < 3 ? "" : argv[2]) << "': known probes: attention\n";
      return kExitUsage;
    }
    if (probe) {
      argv[2] = argv[0];
      argc -= 2;
      argv += 2;
    }
    const auto options = parse_cli(argc, argv, exit_code);
    if (!options) return exit_code;
    if (options->list_stress) {
      std::cout << describe_stress_modes(options->markdown);
      return kExitClean;
    }
    if (options->help_config) {
      std::cout << help_config_text(options->markdown);
      return kExitClean;
    }
    const RunConfig run = resolve_run_config(*options, gpu_available());
    for (const auto& [mode, reason] : run.stress_skipped)
      std::cerr << "note: stress mode " << mode << " skipped: " << reason << "\n";
    if (options->print_config) {
      std::cout << to_json(run).dump(2) << "\n";
      return kExitClean;
    }
    if (options->explain_stress) {
      std::cout << explain_text(run);
      return kExitClean;
    }
    if (probe) return run_attention_probe(run);
    return run_job(run, options->overwrite);
  } catch (const std::exception& e) {
    // ConfigError, or anything else before the output directory was usable (run_job reports
    // every later failure itself): one line, nothing written.
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (...) {
    std::cerr << "error: unknown exception before the run started\n";
    return kExitUsage;
  }
}
