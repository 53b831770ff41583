// The bottom of the include graph: the error every layer may raise for bad user input, and the
// process exit codes (stable: users' scripts and CI read them; documented in README).
#pragma once

#include <stdexcept>

namespace rcl {

// Raised for any invalid user input (bad flag value, bad config field, bad combination).
// train.cpp turns it into a one-line message and exit code 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A checkpoint that cannot be resumed by this run (another model, config or world size; a
// truncated, corrupted or edited file): one line, exit 2, nothing run.
struct CheckpointError : ConfigError {
  using ConfigError::ConfigError;
};

// 0: completed, no fail finding (warnings allowed); 1: at least one fail finding;
// 2: usage or configuration error (before anything ran; no report); 3: crashed or hung (or the
// report itself could not be written); 4: interrupted by a signal (SIGTERM, SIGINT, SIGHUP, SIGUSR1).
enum ExitCode : int {
  kExitClean = 0,
  kExitFailFinding = 1,
  kExitUsage = 2,
  kExitCrashOrHang = 3,
  kExitInterrupted = 4
};

}  // namespace rcl
