#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"

#include <fmt/format.h>

namespace rcl {
namespace {

std::string describe(const RerunOutcome& o) {
  const auto yes_no = [](const std::optional<bool>& b) { return b ? (*b ? "yes" : "no") : "not run"; };
  return fmt::format("reproduced {}, in float32 {}, on CPU {}", o.reproducible ? "yes" : "no", yes_no(o.also_in_fp32),
                     yes_no(o.also_on_cpu));
}

}  // namespace

Classification classify(const RerunOutcome& o) {
  if (!o.reproducible) return Classification::transient;
  if (o.also_in_fp32 == false) return Classification::precision;
  if (o.also_on_cpu == true) return Classification::configuration;
  return Classification::persistent;
}

void record_outcome(Finding& f, const RerunOutcome& outcome) {
  f.reproducible = outcome.reproducible;
  f.also_in_fp32 = outcome.also_in_fp32;
  f.also_on_cpu = outcome.also_on_cpu;
  f.classification = classify(outcome);
}

void apply_rerun(Finding& f, const RerunOutcome& outcome) {
  record_outcome(f, outcome);
  if (*f.classification != Classification::persistent && f.severity == Severity::fail) f.severity = Severity::warn;
  f.message += fmt::format(" [re-run: {}; {}]", to_string(*f.classification), describe(outcome));
}

void TransientHistory::apply(Finding& f, const RerunOutcome& outcome) {
  const Severity detected = f.severity;
  apply_rerun(f, outcome);
  if (*f.classification != Classification::transient) return;
  const int earlier = seen_[f.signature]++;
  if (earlier == 0) return;
  f.severity = detected;
  f.action = Action::isolate_node;
  f.message += fmt::format(" [transient again: {} earlier in this run, so intermittent, not a one-off]", earlier);
}

}  // namespace rcl
