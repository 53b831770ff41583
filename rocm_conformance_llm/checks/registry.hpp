// The one list of detectors: for each, the failure signatures it records (component, usual
// severity, how many findings of it one rank keeps, the fault that proves it fires), the
// thresholds it reads, and how a run builds it. The runner builds every registered detector,
// the FindingLog caps each signature from here, and the tests check the list against the
// fault table (every signature is proven by a fault or a named test).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rocm_conformance_llm/base/registration.hpp"
#include "rocm_conformance_llm/checks/coverage.hpp"
#include "rocm_conformance_llm/checks/detector.hpp"
#include "rocm_conformance_llm/checks/finding_log.hpp"
#include "rocm_conformance_llm/config.hpp"

namespace rcl {

class FaultPlan;
class GradientSync;
class LoopAccess;

struct SignatureSpec {
  std::string id;           // stable: report.json, junit.xml
  std::string component;    // one of component::all; empty: that of the finding it names
  Severity severity = Severity::fail;  // the usual one (a few signatures choose per finding)
  int max_findings = 1;     // per rank and run: a persisting fault is reported a few times, not every step
  std::string proved_by;    // the --inject fault(s) that make it fire ('|' between two), or "test:Suite.Name"
  // What a person does next when it was not re-run and classified (finding.hpp action_of).
  Action action = Action::report_upstream;
};

// What a detector may be built from. Unit tests fill only what they need: a detector whose
// inputs are missing is not built.
struct DetectorContext {
  const DiagnosticsConfig& diag;
  FindingLog& log;
  LoopAccess* loop = nullptr;                // loop-side checks (re-runs, snapshots, replays)
  const FaultPlan* faults = nullptr;         // faults that strike inside a check (gemm-corrupt, rng-skew)
  std::shared_ptr<GradientSync> sync = {};   // cross-rank checks: a process group of several ranks
};

struct DetectorSpec {
  std::string name;
  std::string kind;  // "step" (reads StepRecords), "loop" (acts inside the step), "cross-rank", "run" (built by the runner)
  std::vector<SignatureSpec> signatures;
  std::vector<std::string> thresholds;  // config keys it reads
  // Builds it for one run; returns nullptr where it does not apply (one process, interval 0).
  // Empty for the parts the runner owns (watchdog, crash classifier, --baseline comparison).
  std::function<std::unique_ptr<Detector>(const DetectorContext&)> make;
};

const std::vector<DetectorSpec>& detector_registry();

// Adds `spec` until the returned guard is destroyed (tests, extensions).
using DetectorRegistration = Registration<DetectorSpec>;
[[nodiscard]] DetectorRegistration register_detector(DetectorSpec spec);

// The registered spec of signature `id`; nullptr when no detector declares it.
const SignatureSpec* find_signature(std::string_view id);
// The name of the detector that declares signature `id`; empty when none does.
std::string detector_of_signature(std::string_view id);

// Every registered detector that applies to this run (none when diagnostics are disabled).
// `coverage`, when given, records each one with `make` as built or not, and why.
std::vector<std::unique_ptr<Detector>> make_detectors(const DetectorContext& ctx, RunCoverage* coverage = nullptr);

}  // namespace rcl
