#include "rocm_conformance_llm/checks/detectors/loss_sanity.hpp"

#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/detectors/numerics.hpp"

namespace rcl {

void LossSanityDetector::on_step(const StepRecord& r) {
  if (!std::isfinite(r.loss)) return;  // nonfinite_loss's
  if (!first_) {
    first_ = FirstLoss{.step = r.step, .loss = r.loss};
    return;
  }
  if (r.step > cfg_.warmup_steps + loss_baseline_samples(cfg_) || reported("early_loss_divergence")) return;
  const double above_first = r.loss - first_->loss;
  const bool vocab_known = run_.vocab_size > 1;
  const double uniform = vocab_known ? std::log(static_cast<double>(run_.vocab_size)) : 0.0;
  const bool over_first = above_first > cfg_.loss_sanity_first_step_margin;
  const bool over_uniform = vocab_known && r.loss - uniform > cfg_.loss_sanity_vocab_margin;
  if (!over_first && !over_uniform) return;
  const std::string vs_uniform = vocab_known ? fmt::format(", {:+.2f} against ln({}) = {:.2f}, a uniform guess's loss",
                                                           r.loss - uniform, run_.vocab_size, uniform)
                                             : "";
  nlohmann::json evidence = {{"loss", r.loss},
                             {"first_step", first_->step},
                             {"first_loss", first_->loss},
                             {"above_first_nats", above_first},
                             {"first_step_margin_nats", cfg_.loss_sanity_first_step_margin},
                             {"grad_norm", json_number(r.grad_norm)},
                             {"lr", r.lr}};
  if (vocab_known) {
    evidence["vocab_size"] = run_.vocab_size;
    evidence["above_uniform_nats"] = r.loss - uniform;
    evidence["vocab_margin_nats"] = cfg_.loss_sanity_vocab_margin;
  }
  report(Finding{.component = component::training,
                 .signature = "early_loss_divergence",
                 .severity = Severity::warn,
                 .step = r.step,
                 .rank = r.rank,
                 .message = fmt::format("loss {:.4g} at step {} is {:+.2f} nats against step {}'s {:.4g}{}: the "
                                        "training diverges from its start; check the learning rate, warm-up and "
                                        "initialisation for this model's size",
                                        r.loss, r.step, above_first, first_->step, first_->loss, vs_uniform),
                 .evidence = std::move(evidence)});
}

}  // namespace rcl
