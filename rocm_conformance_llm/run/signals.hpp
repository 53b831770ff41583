// Stop requests from outside: SIGTERM, SIGINT, SIGHUP and SIGUSR1 (Slurm's `--signal=USR1@N`
// before a time limit). The handler only records the signal (async-signal-safe); the run stops
// at the next step boundary and reports `interrupted` (exit code 4). A watcher thread forces the
// report and the exit when a second signal arrives, or when the run has not reached a boundary
// within the grace (the main thread may be stuck in a collective or a wedged kernel).
#pragma once

#include <chrono>
#include <functional>

namespace rcl::signals {

// How long the run gets to reach a step boundary after the first signal.
inline constexpr std::chrono::seconds kStopGrace{10};

// Called on the watcher thread with the signal; it writes the report and must not return.
using ForceStop = std::function<void(int signal)>;

// Installs the handlers and starts the watcher (once per process; later calls do nothing), and
// ignores SIGPIPE: a write to a lost peer's socket is an error the run reports, not its death.
void install();
// The first stop signal received, 0 when none. Safe from any thread.
int received();
// "SIGTERM", "SIGINT", ...
const char* name(int signal);
// The run's way out when it cannot stop by itself; an empty function removes it. Without one,
// a forced stop exits with code 4 and no report (nothing to write into yet).
void set_force_stop(ForceStop force);

}  // namespace rcl::signals
