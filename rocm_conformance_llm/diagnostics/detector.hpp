// Step-level detectors: StepObservers that watch every finished optimizer step for one family
// of failure signatures and write findings attributed to the ROCm component behind it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/diagnostics/finding.hpp"
#include "rocm_conformance_llm/step_record.hpp"

namespace rcl {

class Detector : public StepObserver {
 public:
  Detector(const DiagnosticsConfig& cfg, FindingLog& log) : cfg_(cfg), log_(log) {}
  // Whole-run checks (steady-state variance, late slowdown); called once after the last step.
  virtual void finish() {}

 protected:
  // Records `f` unless its signature already reached `max_per_signature` findings: a NaN that
  // persists for 500 steps is one finding, not 500.
  void report(Finding f, int max_per_signature = 1);
  bool reported(const std::string& signature) const { return reported_.count(signature) > 0; }
  bool in_warmup(const StepRecord& r) const { return r.step <= cfg_.warmup_steps; }

  const DiagnosticsConfig cfg_;

 private:
  FindingLog& log_;
  std::map<std::string, int> reported_;
};

// Every step-level detector, fed as one observer. Empty when diagnostics are disabled.
class StepDetectors final : public StepObserver {
 public:
  StepDetectors(const DiagnosticsConfig& cfg, FindingLog& log);
  void on_step(const StepRecord& record) override;
  void finish();  // end-of-run checks; call once after the last step (not after a crash)

 private:
  std::vector<std::unique_ptr<Detector>> detectors_;
};

}  // namespace rcl
