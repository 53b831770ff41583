#include "rocm_conformance_llm/checks/detectors/anomaly_rerun.hpp"

#include <algorithm>
#include <cmath>

#include "rocm_conformance_llm/model.hpp"

namespace rcl {
namespace {

// Two snapshots of parameters plus AdamW moments every step: 3 GB at GPT-2-small's 124M
// parameters (the `small` preset), too much for `large`'s 1.5B, which is not re-run.
constexpr int64_t kRerunMaxParameters = 200'000'000;

enum class Metric { loss, grad_norm };
enum class Test { nonfinite, spike, log_spike };

// The anomalies a re-run of the step can judge: the value it is read from and how.
struct RerunRule {
  const char* signature;
  Metric metric;
  Test test;
};
constexpr RerunRule kRerunRules[] = {
    {"nonfinite_loss", Metric::loss, Test::nonfinite},
    {"nonfinite_grad_norm", Metric::grad_norm, Test::nonfinite},
    {"loss_spike", Metric::loss, Test::spike},
    {"grad_norm_spike", Metric::grad_norm, Test::log_spike},
};

const RerunRule* rule_for(const std::string& signature) {
  for (const auto& rule : kRerunRules)
    if (signature == rule.signature) return &rule;
  return nullptr;
}

// The spiked value and the recent median, from the spike finding's evidence.
std::optional<std::pair<double, double>> spike_and_median(const Finding& f, Metric metric) {
  const char* key = metric == Metric::loss ? "loss" : "grad_norm";
  const auto& e = f.evidence;
  if (!e.contains(key) || !e.contains("baseline_median") || !e.at(key).is_number() ||
      !e.at("baseline_median").is_number())
    return std::nullopt;
  return std::pair(e.at(key).get<double>(), e.at("baseline_median").get<double>());
}

}  // namespace

std::optional<bool> shows_anomaly(const Finding& f, double loss, double grad_norm) {
  const RerunRule* rule = rule_for(f.signature);
  if (!rule) return std::nullopt;
  const double value = rule->metric == Metric::loss ? loss : grad_norm;
  if (rule->test == Test::nonfinite) return !std::isfinite(value);
  const auto spike = spike_and_median(f, rule->metric);
  if (!spike) return std::nullopt;
  if (!std::isfinite(value)) return true;  // worse than the spike
  auto [spiked, median] = *spike;
  double v = value;
  if (rule->test == Test::log_spike) {
    if (v <= 0 || spiked <= 0 || median <= 0) return std::nullopt;
    v = std::log10(v), spiked = std::log10(spiked), median = std::log10(median);
  }
  return std::abs(v - spiked) < std::abs(v - median);
}

bool AnomalyRerun::applies(const TrainingConfig& cfg) { return parameter_count(cfg) <= kRerunMaxParameters; }

AnomalyRerun::AnomalyRerun(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop)
    : Detector(cfg, log), loop_(loop) {}

void AnomalyRerun::on_step(const StepRecord& r) {
  // The step detectors registered before this one have judged the record: their findings are in.
  if (log().size() == findings_seen_) return;
  const auto findings = log().snapshot();
  for (size_t i = findings_seen_; i < findings.size(); ++i) {
    const Finding& f = findings[i];
    // Judgeable: a finite re-run says whether it shows the anomaly.
    if (f.step == r.step && !f.classification && shows_anomaly(f, 1.0, 1.0)) pending_.push_back({i, f});
  }
  findings_seen_ = findings.size();
}

void AnomalyRerun::between_steps(int64_t /*step*/) {
  // The anomalies noted in this iteration are of the step before the one just run.
  if (!pending_.empty()) {
    const int64_t anomalous = pending_.front().finding.step;
    for (const auto& before : before_)
      if (before.step == anomalous - 1) rerun(before);
    pending_.clear();
  }
  before_.push_back(loop_.snapshot());
  if (before_.size() > 2) before_.pop_front();
}

void AnomalyRerun::rerun(const LoopAccess::Snapshot& before) {
  const auto& cfg = loop_.ctx().cfg;
  LoopAccess::Snapshot now = loop_.snapshot();
  // Every rank re-runs (the step's gradient all-reduce) and judges the mean loss, as published.
  const auto run_again = [&](bool fp32) {
    loop_.restore(before);
    auto values = loop_.run_unpublished_step(fp32);
    values.loss = loop_.mean_across_ranks(values.loss);
    return values;
  };
  loop_.enter_phase(phase::rerun, pending_.front().finding.step);
  const auto same = run_again(false);
  const bool any_reproduced = std::any_of(pending_.begin(), pending_.end(), [&](const Anomaly& a) {
    return shows_anomaly(a.finding, same.loss, same.grad_norm) == true;
  });
  // Under fp32 training the re-run was float32 already.
  const bool reduced = cfg.mixed_precision != Precision::fp32;
  std::optional<LoopAccess::StepValues> fp32;
  if (any_reproduced && reduced) fp32 = run_again(true);
  loop_.restore(std::move(now));

  for (const auto& a : pending_) {
    RerunOutcome outcome;
    outcome.reproducible = shows_anomaly(a.finding, same.loss, same.grad_norm).value_or(false);
    if (outcome.reproducible)
      outcome.also_in_fp32 = fp32 ? shows_anomaly(a.finding, fp32->loss, fp32->grad_norm).value_or(false) : true;
    log().amend(a.index, [&](Finding& f) { transients_.apply(f, outcome); });
  }
}

}  // namespace rcl
