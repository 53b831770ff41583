// One run, from a resolved configuration to an exit code: sets up the device, the process
// group, the trainer and its observers (console, metrics, detectors, watchdog), runs, and
// always ends with a verdict and the reports, also when the run crashed or hung.
#pragma once

#include "rocm_conformance_llm/run/run_config.hpp"

namespace rcl {

// Returns one of ExitCode. Throws (ConfigError for bad input) only before the output directory
// is usable; from then on every failure is a report (crashed, exit 3) and every stop signal
// too (interrupted, exit 4).
int run_job(const RunConfig& run, bool overwrite);

// --explain-step: which part acts at which point of a step for this resolved run (the trainer and
// its checks built as for the run; nothing written, no step run), on stdout. Returns 0; throws
// ConfigError (exit 2) for bad input, as the run would.
int explain_step(const RunConfig& run);

// `probe attention`: the attention parity probe alone, on the configured model at its
// initialisation; its JSON on stdout. 0 every backend within its bound, 1 a mismatch; throws
// ConfigError (exit 2) for bad input. `--inject attention-mask-corrupt` proves the exit code.
int run_attention_probe(const RunConfig& run);

}  // namespace rcl
