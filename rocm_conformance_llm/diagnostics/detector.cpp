#include "rocm_conformance_llm/diagnostics/detector.hpp"

#include "rocm_conformance_llm/diagnostics/collectives.hpp"
#include "rocm_conformance_llm/diagnostics/memory.hpp"
#include "rocm_conformance_llm/diagnostics/numerics.hpp"
#include "rocm_conformance_llm/diagnostics/step_time.hpp"

namespace rcl {

void Detector::report(Finding f, int max_per_signature) {
  int& count = reported_[f.signature];
  if (count >= max_per_signature) return;
  ++count;
  log_.add(std::move(f));
}

StepDetectors::StepDetectors(const DiagnosticsConfig& cfg, FindingLog& log) {
  if (!cfg.enabled) return;
  detectors_.push_back(std::make_unique<NumericsDetector>(cfg, log));
  detectors_.push_back(std::make_unique<StepTimeDetector>(cfg, log));
  detectors_.push_back(std::make_unique<MemoryDetector>(cfg, log));
  detectors_.push_back(std::make_unique<CollectiveDetector>(cfg, log));
}

void StepDetectors::on_step(const StepRecord& record) {
  for (auto& d : detectors_) d->on_step(record);
}

void StepDetectors::finish() {
  for (auto& d : detectors_) d->finish();
}

}  // namespace rcl
