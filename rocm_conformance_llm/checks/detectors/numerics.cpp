#include "rocm_conformance_llm/checks/detectors/numerics.hpp"

#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/findings/rerun_outcome.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

namespace {
// A perfectly flat loss (same batch, tiny model) has a MAD of zero: floor the scale at 1% of
// the loss so only a jump of several percent can count as a spike.
constexpr double kLossScaleFloor = 0.01;
// Step-to-step noise is judged over this many baseline windows: long enough that dropout's
// occasional bad batch is in it, short enough to follow the loss as it falls.
constexpr int64_t kNoiseWindows = 4;
// Dropout's worst batches come in a heavy tail that no z-score bounds (37% over the median at
// z 12 in a clean rng-mode run): a spike must also clear the run's own largest healthy jump by
// this margin.
constexpr double kTailMargin = 1.5;
// Gradient norms swing by several x in healthy training: judge them in decades.
constexpr double kLogGradNormScaleFloor = 0.25;

Finding numerics_finding(const std::string& signature, Severity severity, const StepRecord& r, std::string message,
                         nlohmann::json evidence) {
  return Finding{.component = component::rocblas,
                 .signature = signature,
                 .severity = severity,
                 .step = r.step,
                 .rank = r.rank,
                 .message = std::move(message),
                 .evidence = std::move(evidence)};
}
}  // namespace

void NumericsDetector::on_step(const StepRecord& r) {
  const nlohmann::json values = {{"loss", json_number(r.loss)},
                                 {"grad_norm", json_number(r.grad_norm)},
                                 {"lr", r.lr},
                                 {"loss_scale", r.loss_scale},
                                 {"skipped", r.skipped}};
  if (!std::isfinite(r.loss))
    report(numerics_finding("nonfinite_loss", Severity::fail, r, fmt::format("loss is {} at step {}", r.loss, r.step),
                            values));

  consecutive_skips_ = r.skipped ? consecutive_skips_ + 1 : 0;
  if (!std::isfinite(r.grad_norm) && !r.skipped)
    report(numerics_finding(
        "nonfinite_grad_norm", Severity::fail, r,
        fmt::format("gradient norm is {} outside fp16 loss scaling: the step's update was withheld", r.grad_norm),
        values));
  if (consecutive_skips_ >= cfg_.window_steps)
    report(numerics_finding("persistent_overflow_skips", Severity::warn, r,
                            fmt::format("fp16 loss scaler skipped {} steps in a row (scale {:g}): gradients overflow "
                                        "at every scale",
                                        consecutive_skips_, r.loss_scale),
                            values));

  if (std::isfinite(r.loss) && !in_warmup(r)) check_spike(r);
  if (std::isfinite(r.grad_norm) && r.grad_norm > 0 && !r.skipped && !in_warmup(r)) check_grad_norm(r);
}

void NumericsDetector::check_grad_norm(const StepRecord& r) {
  const double log_norm = std::log10(r.grad_norm);
  const auto min_samples = static_cast<size_t>(std::max<int64_t>(3, cfg_.window_steps / 2));
  if (log_grad_norms_.size() >= min_samples) {
    const std::vector<double> baseline(log_grad_norms_.begin(), log_grad_norms_.end());
    const double median = stats::median(baseline);
    const double z = (log_norm - median) / std::max(stats::scaled_mad(baseline), kLogGradNormScaleFloor);
    if (z >= run_threshold(cfg_.loss_spike_zscore)) {
      report(numerics_finding("grad_norm_spike", Severity::warn, r,
                              fmt::format("gradient norm {:.4g} is {:.0f}x the recent median {:.4g}", r.grad_norm,
                                          std::pow(10.0, log_norm - median), std::pow(10.0, median)),
                              {{"grad_norm", r.grad_norm},
                               {"baseline_median", std::pow(10.0, median)},
                               {"log10_zscore", z},
                               {"threshold", run_threshold(cfg_.loss_spike_zscore)}}));
      return;  // a corrupted norm never enters the baseline
    }
  }
  log_grad_norms_.push_back(log_norm);
  if (static_cast<int64_t>(log_grad_norms_.size()) > cfg_.window_steps) log_grad_norms_.pop_front();
}

NumericsDetector::LossReference NumericsDetector::loss_reference() const {
  const std::vector<double> levels(baseline_.begin(), baseline_.end());
  const double median = stats::median(levels);
  const double noise = stats::difference_noise({recent_.begin(), recent_.end()});
  return {median, std::max({stats::scaled_mad(levels), noise, kLossScaleFloor * std::abs(median), 1e-12}),
          std::max(cfg_.loss_spike_min_jump, kTailMargin * largest_jump_)};
}

bool NumericsDetector::is_spike(double loss, const LossReference& ref) const {
  // Both: a z-score alone calls dropout's bad batches spikes on a smooth run (clean --stress rng runs), a
  // relative jump alone misses them on a noisy one.
  return (loss - ref.median) / ref.scale >= run_threshold(cfg_.loss_spike_zscore) &&
         loss - ref.median >= ref.min_jump * std::abs(ref.median);
}

void NumericsDetector::check_spike(const StepRecord& r) {
  if (pending_) {
    ++pending_->steps_after;
    const LossReference& ref = pending_->reference;
    const double z = (r.loss - ref.median) / ref.scale;
    if (!is_spike(r.loss, ref)) {
      pending_.reset();  // recovered: a transient spike, already reported as a warning
    } else if (pending_->steps_after >= cfg_.window_steps) {
      report(Finding{.component = component::rocblas,
                     .signature = "loss_divergence",
                     .severity = Severity::fail,
                     .step = pending_->step,
                     .rank = r.rank,
                     .message = fmt::format("loss spiked at step {} and has not recovered after {} steps "
                                            "(now {:.4g}, baseline median {:.4g})",
                                            pending_->step, pending_->steps_after, r.loss, ref.median),
                     .evidence = {{"spike_step", pending_->step},
                                  {"spike_loss", pending_->loss},
                                  {"checked_until_step", r.step},
                                  {"current_loss", r.loss},
                                  {"current_zscore", z},
                                  {"baseline_median", ref.median}}});
      pending_.reset();
      baseline_.clear();  // the new level is the run's reality now; start afresh
      recent_.clear();
      largest_jump_ = 0.0;
    }
    return;  // values during a spike never enter the baseline
  }

  const auto min_samples = static_cast<size_t>(loss_baseline_samples(cfg_));
  if (baseline_.size() >= min_samples) {
    const LossReference ref = loss_reference();
    if (!is_spike(r.loss, ref)) {
      largest_jump_ = std::max(largest_jump_, (r.loss - ref.median) / std::abs(ref.median));
    } else {
      const double z = (r.loss - ref.median) / ref.scale;
      report(numerics_finding("loss_spike", Severity::warn, r,
                              fmt::format("loss {:.4g} is {:.1f} robust standard deviations ({:.0f}%) above the "
                                          "recent median {:.4g}",
                                          r.loss, z, 100.0 * (r.loss / ref.median - 1.0), ref.median),
                              {{"loss", r.loss},
                               {"zscore", z},
                               {"threshold", run_threshold(cfg_.loss_spike_zscore)},
                               {"min_jump", ref.min_jump},
                               {"baseline_median", ref.median},
                               {"noise_scale", ref.scale},
                               {"baseline_steps", baseline_.size()}}));
      pending_ = PendingSpike{.step = r.step, .loss = r.loss, .reference = ref};
      return;
    }
  }
  baseline_.push_back(r.loss);
  if (static_cast<int64_t>(baseline_.size()) > cfg_.window_steps) baseline_.pop_front();
  recent_.push_back(r.loss);
  if (static_cast<int64_t>(recent_.size()) > kNoiseWindows * cfg_.window_steps) recent_.pop_front();
}

std::optional<size_t> first_nonfinite(const std::vector<NamedTensor>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& t = outputs[i].value;
    if (t.defined() && !t.isfinite().all().item<bool>()) return i;
  }
  return std::nullopt;
}

namespace {
std::optional<std::string> first_nonfinite_name(const std::vector<NamedTensor>& outputs) {
  const auto index = first_nonfinite(outputs);
  return index ? std::optional<std::string>(outputs[*index].name) : std::nullopt;
}
}  // namespace

NonFiniteDiagnosis diagnose_nonfinite(const MicroBatchRun& run, bool reduced_precision) {
  NonFiniteDiagnosis d;
  d.first_nonfinite_training = first_nonfinite_name(run(/*fp32=*/!reduced_precision));
  if (!d.first_nonfinite_training) {
    d.classification = "not_reproduced";
    return d;
  }
  if (!reduced_precision) {
    d.classification = "fault";
    d.first_nonfinite_fp32 = d.first_nonfinite_training;
    return d;
  }
  d.first_nonfinite_fp32 = first_nonfinite_name(run(/*fp32=*/true));
  d.classification = d.first_nonfinite_fp32 ? "fault" : "numerics";
  return d;
}

Finding to_finding(const NonFiniteDiagnosis& d, const std::string& precision, int64_t step, int rank) {
  Finding f;
  f.component = component::rocblas;
  f.step = step;
  f.rank = rank;
  const std::string where = d.first_nonfinite_training.value_or("?");
  if (d.classification == "numerics") {
    f.signature = "nonfinite_reduced_precision_only";
    f.severity = Severity::warn;
    f.message = fmt::format("non-finite first at '{}' under {}, finite when re-run in fp32", where, precision);
  } else if (d.classification == "fault") {
    f.signature = "nonfinite_also_fp32";
    f.severity = Severity::fail;
    f.message = fmt::format(
        "non-finite first at '{}' under {} and also in fp32 (at '{}'): not a "
        "precision effect",
        where, precision, d.first_nonfinite_fp32.value_or("?"));
  } else {
    f.signature = "nonfinite_not_reproducible";
    f.severity = Severity::warn;
    f.message = fmt::format(
        "re-running the micro-batch under {} gave finite values: the "
        "non-finite result was transient",
        precision);
  }
  // The localiser's re-runs answer the same questions as the anomaly re-run (anomaly_rerun.hpp).
  RerunOutcome outcome{.reproducible = d.classification != "not_reproduced"};
  if (outcome.reproducible) outcome.also_in_fp32 = d.classification == "fault";
  record_outcome(f, outcome);
  f.evidence = {{"classification", d.classification},
                {"precision", precision},
                {"first_nonfinite_training", d.first_nonfinite_training.value_or("")},
                {"first_nonfinite_fp32", d.first_nonfinite_fp32.value_or("")}};
  return f;
}

NonFiniteLocaliser::NonFiniteLocaliser(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop)
    : Detector(cfg, log), loop_(loop) {}

void NonFiniteLocaliser::on_gradients(int64_t step, const std::vector<torch::Tensor>& /*params*/,
                                      const torch::Tensor& /*loss_sum*/, int64_t first_micro_batch) {
  if (loop_.replaying()) return;
  first_micro_batch_[step] = first_micro_batch;
  while (first_micro_batch_.size() > 4) first_micro_batch_.erase(first_micro_batch_.begin());
}

void NonFiniteLocaliser::on_loss(int64_t step, double local_loss) {
  const auto where = first_micro_batch_.find(step);
  if (diagnosed_ || std::isfinite(local_loss) || where == first_micro_batch_.end()) return;
  diagnosed_ = true;
  const int64_t first_micro_batch = where->second;
  const auto& cfg = loop_.ctx().cfg;
  const auto& device = loop_.ctx().device;
  const RngSnapshot rng = capture_rng(device);  // re-runs draw the same dropout masks
  NonFiniteDiagnosis diagnosis;
  int64_t micro = 0;
  for (; micro < cfg.grad_accum_steps; ++micro) {
    const Batch batch = loop_.train_batch(first_micro_batch + micro);
    const auto rerun = [&](bool fp32) {
      torch::NoGradGuard no_grad;
      restore_rng(rng, device);
      AutocastGuard autocast(device.type(), fp32 ? AutocastState{} : loop_.autocast_state());
      std::vector<torch::Tensor> outputs;
      const auto loss = loop_.forward_loss(batch, step, micro == 0, &outputs);
      std::vector<NamedTensor> named;
      for (size_t i = 0; i < outputs.size(); ++i)
        named.push_back({i == 0 ? std::string("embedding") : fmt::format("block{}", i - 1), outputs[i]});
      named.push_back({"loss", loss});
      return named;
    };
    diagnosis = diagnose_nonfinite(rerun, cfg.mixed_precision != Precision::fp32);
    if (diagnosis.classification != "not_reproduced") break;
  }
  restore_rng(rng, device);
  Finding finding = to_finding(diagnosis, name_of(cfg.mixed_precision), step, loop_.rank());
  finding.evidence["micro_batch"] = std::min(micro, cfg.grad_accum_steps - 1);
  report(std::move(finding));
}

}  // namespace rcl
