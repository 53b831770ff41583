#include "rocm_conformance_llm/checks/detectors/shadow_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

namespace {

// Runs `op` once more and judges the new result (a host read: only after a mismatch).
bool wrong_again(const TappedOp& op) { return shadow_mismatch(shadow_verdict(op, op.rerun())[0].item<double>()); }

// The op with its inputs on `device` in `dtype`.
TappedOp variant(const TappedOp& op, const torch::Device& device, torch::ScalarType dtype) {
  TappedOp v{.kind = op.kind, .eps = op.eps};
  for (const auto& t : op.inputs) v.inputs.push_back(t.defined() ? t.to(device, dtype) : t);
  return v;
}

}  // namespace

ShadowCheck::ShadowCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop)
    : Detector(cfg, log), loop_(loop) {}

ShadowCheck::~ShadowCheck() { disarm(); }

void ShadowCheck::on_step_begin(int64_t /*step*/) { read_verdict(); }

void ShadowCheck::before_forward(int64_t step, bool first) {
  if (!first || loop_.replaying() || step == armed_step_ || step % cfg_.shadow_check_interval != 0) return;
  armed_step_ = step;
  seen_.clear();
  if (retry_) {
    // The last check of this op was not judged (non-finite inputs: a NaN from an earlier layer's
    // call of it poisons the later ones): its first occurrence now, whose inputs come from other ops.
    target_ = {*retry_, 0};
    retry_.reset();
  } else {
    // Key-major rotation: every op within keys_.size() steps; its occurrences (layers) in turn.
    // (The first step knows no ops yet: it checks the first one the forward runs.)
    if (!keys_.empty()) {
      const auto n = static_cast<int64_t>(keys_.size());
      const auto& key = keys_[round_ % n];
      target_ = {key, (round_ / n) % std::max<int64_t>(1, occurrences_[key])};
    }
    ++round_;
  }
  armed_.emplace(static_cast<OpObserver&>(*this));
}

torch::Tensor ShadowCheck::on_logits(torch::Tensor logits, int64_t /*step*/) {
  disarm();
  return logits;
}

void ShadowCheck::disarm() {
  armed_.reset();
  if (!checked_) return;
  checked_->occurrences = occurrences_[checked_->key];
  pending_ = std::move(checked_);
  checked_.reset();
}

void ShadowCheck::observe(const TappedOp& tapped) {
  if (!wants(tapped.key())) return;
  if (auto op = tapped.as_computed()) captured(*op);
}

bool ShadowCheck::wants(const OpKey& key) {
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) keys_.push_back(key);
  const int64_t occurrence = seen_[key]++;
  occurrences_[key] = std::max(occurrences_[key], occurrence + 1);
  if (target_.first.empty()) target_ = {key, 0};  // the first step: the first op seen
  return key == target_.first && occurrence == target_.second;
}

void ShadowCheck::captured(const TappedOp& op) {
  Pending p{.step = armed_step_, .key = target_.first, .name = op.describe(), .occurrence = target_.second};
  bool keep_inputs = true;
  if (op.output.is_cpu()) {
    const auto v = host_verdict(op);
    p.verdict.assign(v.begin(), v.end());
    keep_inputs = shadow_mismatch(v[0]);  // decided now: copies only for a re-run
  } else {
    p.on_device.emplace(std::vector<torch::Tensor>{shadow_verdict_aten(op)});
  }
  if (keep_inputs) {
    // Copies: the optimizer changes the weights in place before the verdict is read.
    TappedOp kept{.kind = op.kind, .eps = op.eps};
    for (const auto& t : op.inputs) kept.inputs.push_back(t.defined() ? t.detach().clone() : t);
    p.op = std::move(kept);
  }
  checked_ = std::move(p);
}

void ShadowCheck::finish() { read_verdict(); }

void ShadowCheck::read_verdict() {
  if (!pending_) return;
  Pending p = std::move(*pending_);
  pending_.reset();
  const auto v = p.on_device ? p.on_device->get() : p.verdict;
  const double worst = std::isnan(v[0]) ? std::numeric_limits<double>::infinity() : v[0], relative = v[1];
  if (!shadow_mismatch(v[0])) {
    if (v[2] == 0 && p.occurrence > 0) retry_ = p.key;
    return;
  }
  // The same op on the same inputs once more (a wrong result again: persistent), in fp32 when
  // it ran in bf16/fp16, and on the CPU when it ran on a GPU (fp16 CPU GEMMs may not exist).
  const auto& op = *p.op;
  const auto device = op.inputs[0].device();
  const auto dtype = op.inputs[0].scalar_type();
  // Classified and capped like every re-run anomaly (rerun_outcome.hpp): a persistent or a repeated
  // transient wrong result fails; a one-off transient warns.
  RerunOutcome outcome{.reproducible = wrong_again(op)};
  if (outcome.reproducible) {
    outcome.also_in_fp32 = reduced_precision(dtype) ? wrong_again(variant(op, device, torch::kFloat)) : true;
    if (!device.is_cpu())
      outcome.also_on_cpu = wrong_again(variant(op, torch::kCPU, dtype == torch::kHalf ? torch::kFloat : dtype));
  }
  Finding f{.component = component::rocblas,
            .signature = "gemm_shadow_mismatch",
            .severity = Severity::fail,
            .step = p.step,
            .rank = loop_.rank(),
            .message = fmt::format("{} (occurrence {} of {} in the forward) at step {}: error {:.3g}x its float64 "
                                   "bound (relative error {:.3g})",
                                   p.name, p.occurrence, p.occurrences, p.step, worst, relative),
            .evidence = {{"op", p.name},
                         {"occurrence", p.occurrence},
                         {"worst_error_over_bound", json_number(worst)},
                         {"relative_error", json_number(relative)},
                         {"bound_factor", kShadowBoundFactor},
                         {"reproducible", outcome.reproducible}}};
  transients_.apply(f, outcome);
  report(std::move(f));
}

}  // namespace rcl
