#include "rocm_conformance_llm/diagnostics/detector.hpp"

namespace rcl {

void Detector::report(std::optional<Finding> f) {
  if (!f) return;
  reported_.insert(f->signature);
  log_.add(std::move(*f));
}

}  // namespace rcl
