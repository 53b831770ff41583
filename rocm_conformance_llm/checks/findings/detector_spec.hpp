// How the detector catalog (checks/detectors/catalog.cpp) describes a detector: the failure
// signatures it records (component, usual severity, how many findings of it one rank keeps, the
// fault that proves it fires), the thresholds it reads, and how a run builds it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rocm_conformance_llm/base/registration.hpp"
#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/config.hpp"

namespace rcl {

class FaultPlan;
class GradientSync;
class LoopAccess;

// What a detector may be built from. Unit tests fill only what they need: a detector whose
// inputs are missing is not built.
struct DetectorContext {
  const DiagnosticsConfig& diag;
  FindingLog& log;
  LoopAccess* loop = nullptr;               // loop-side checks (re-runs, snapshots, replays)
  const FaultPlan* faults = nullptr;        // faults that strike inside a check (gemm-corrupt, rng-skew)
  std::shared_ptr<GradientSync> sync = {};  // cross-rank checks: a process group of several ranks
};

struct DetectorSpec {
  std::string name;
  std::string
      kind;  // "step" (reads StepRecords), "loop" (acts inside the step), "cross-rank", "run" (built by the runner)
  std::vector<SignatureSpec> signatures;
  std::vector<std::string> thresholds;  // config keys it reads
  // Builds it for one run; returns nullptr where it does not apply (one process, interval 0).
  // Empty for the parts the runner owns (watchdog, crash classifier, --baseline comparison).
  std::function<std::unique_ptr<Detector>(const DetectorContext&)> make;
};

// Keeps a detector in the catalog until it is destroyed (tests, extensions).
using DetectorRegistration = Registration<DetectorSpec>;

}  // namespace rcl
