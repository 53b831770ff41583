#include "rocm_conformance_llm/checks/findings/detector.hpp"

#include <algorithm>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {

void Detector::report(std::optional<Finding> f) {
  if (!f) return;
  reported_.insert(f->signature);
  log_.add(std::move(*f));
}

double Detector::run_threshold(double configured) const {
  const double per_step = cfg_.false_alarm_budget / static_cast<double>(std::max<int64_t>(1, run_.steps));
  return std::max(configured, stats::upper_normal_quantile(per_step));
}

}  // namespace rcl
