// Entry point: parse the command line, resolve the configuration, run the job.
#include <iostream>
#include <string>
#include <string_view>

#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/platform/doctor.hpp"
#include "rocm_conformance_llm/platform/rocm_knobs.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/run/job.hpp"

int main(int argc, char** argv) {
  using namespace rcl;
  try {
    int exit_code = kExitClean;
    if (argc > 1 && std::string_view(argv[1]) == "compare") {
      const auto compare = parse_compare_cli(argc - 1, argv + 1, exit_code);
      return compare ? run_compare(*compare) : exit_code;
    }
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
    // The rocm.* knobs before the first HIP call (gpu_available() is one): ROCr reads
    // HSA_ENABLE_SDMA once, when HIP initialises. The runner applies them again with the output
    // directory known (per-run MIOpen user DB); platform/rocm_knobs.hpp has the rule.
    apply_rocm_knobs(resolve_rocm_config(*options), options->output_dir);
    if (options->doctor) {
      const auto checks = run_doctor([&] {
        DoctorInputs in = doctor_inputs_of_this_process();
        in.cmdline_path = options->doctor_cmdline;
        in.kfd_topology = options->doctor_kfd_topology;
        return in;
      }());
      std::cout << (options->doctor_json ? doctor_to_json(checks).dump(2) + "\n" : doctor_text(checks));
      return doctor_to_json(checks).at("status") == "fail" ? kExitFailFinding : kExitClean;
    }
    const RunConfig run = resolve_run_config(*options, gpu_available());
    for (const auto& [mode, reason] : run.stress_skipped)
      std::cerr << "note: stress mode " << mode << " skipped: " << reason << "\n";
    if (options->print_config || options->explain_stress) {
      std::cout << (options->print_config ? to_json(run).dump(2) + "\n" : explain_text(run));
      // A composition the device cannot hold is shown, then refused as a run would be.
      if (const std::string refused = refusal(run); !refused.empty()) {
        std::cerr << "error: " << refused << "\n";
        return kExitUsage;
      }
      return kExitClean;
    }
    if (probe) return run_attention_probe(run);
    if (options->explain_step) return explain_step(run);
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
