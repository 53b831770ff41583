// One run, from a resolved configuration to an exit code: sets up the device, the process
// group, the trainer and its observers (console, metrics, detectors, watchdog), runs, and
// always ends with a verdict and the reports, also when the run crashed or hung.
#pragma once

#include "rocm_conformance_llm/cli.hpp"

namespace rcl {

// Returns one of ExitCode. Throws ConfigError for bad input found before anything ran.
int run_job(const RunConfig& run, bool overwrite);

}  // namespace rcl
