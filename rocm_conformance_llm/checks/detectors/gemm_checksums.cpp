#include "rocm_conformance_llm/checks/detectors/gemm_checksums.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_bound.hpp"
#include "rocm_conformance_llm/checks/detectors/shadow_verdict.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

namespace {

// A verdict's larger ratio, NaN (a NaN from finite inputs) as infinitely wrong.
double worst_ratio(const std::array<double, 5>& v) {
  if (std::isnan(v[0]) || std::isnan(v[2])) return std::numeric_limits<double>::infinity();
  return std::max(v[0], v[2]);
}

bool mismatch(const std::array<double, 5>& v) { return shadow_mismatch(v[0]) || shadow_mismatch(v[2]); }

// What a row and a column of the product are, so a finding points into the model.
std::pair<const char*, const char*> axes(GemmPass pass) {
  switch (pass) {
    case GemmPass::forward: return {"token", "output feature"};
    case GemmPass::grad_input: return {"token", "input feature"};
    case GemmPass::grad_weight: return {"output feature", "input feature"};
  }
  return {"row", "column"};
}

constexpr size_t kNamesListed = 16;

}  // namespace

GemmChecksumCheck::GemmChecksumCheck(const DiagnosticsConfig& cfg, FindingLog& log, LoopAccess& loop)
    : Detector(cfg, log), loop_(loop) {}

void GemmChecksumCheck::on_step_begin(int64_t step) {
  read_verdicts();
  const std::lock_guard lock(mutex_);
  known_at_step_start_ = names_.size();
  if (known_at_step_start_ > 0)
    rotation_start_ = (rotation_start_ + size_t(cfg_.gemm_checksums_per_step)) % known_at_step_start_;
  current_.emplace(StepVerdicts{.step = step});
  armed_.emplace(static_cast<GemmObserver*>(this));
}

void GemmChecksumCheck::on_gradients(int64_t /*step*/, const std::vector<torch::Tensor>& /*params*/,
                                     const torch::Tensor& /*loss_sum*/, int64_t /*first_micro_batch*/) {
  armed_.reset();
  {
    const std::lock_guard lock(mutex_);
    if (!current_) return;
    pending_ = std::move(current_);
    current_.reset();
    if (!pending_->on_device_parts.empty()) {
      pending_->on_device.emplace(pending_->on_device_parts);  // one copy of the step's verdicts
      pending_->on_device_parts.clear();
    }
  }
  if (!pending_->on_device) read_verdicts();  // decided on the host already: judged in its step
}

bool GemmChecksumCheck::wants(const std::string& name) {
  auto it = std::find(names_.begin(), names_.end(), name);
  const auto index = size_t(it - names_.begin());
  if (it == names_.end()) names_.push_back(name);
  if (cfg_.gemm_checksums == GemmChecksums::all || recheck_.count(name)) return true;
  const auto per_step = size_t(cfg_.gemm_checksums_per_step);
  const size_t known = known_at_step_start_;
  if (known == 0) return index < per_step;  // the first step: the first GEMMs it runs
  if (index >= known) return false;
  return (index + known - rotation_start_) % known < per_step;
}

void GemmChecksumCheck::observe_gemm(const GemmCall& call) {
  if (call.c.numel() == 0) return;  // an expert no token was routed to
  const auto name = call.name();
  const std::lock_guard lock(mutex_);
  if (!current_ || !wants(name)) return;
  current_->calls.push_back(Checked{.name = name,
                                    .site = call.site,
                                    .layer = call.layer,
                                    .pass = call.pass,
                                    .shape = {call.a.size(0), call.a.size(1), call.b.size(1)},
                                    .dtype = std::string(c10::toString(call.c.scalar_type())),
                                    .device = call.c.device().str()});
  if (call.c.is_cpu()) current_->on_host.push_back(host_gemm_checksums(call.a, call.b, call.bias, call.c));
  else current_->on_device_parts.push_back(gemm_checksums_aten(call.a, call.b, call.bias, call.c));
}

void GemmChecksumCheck::finish() {
  armed_.reset();
  current_.reset();  // a step that never reached its gradients: no complete verdict
  read_verdicts();
  if (suspect_) report_suspect(std::move(*suspect_), std::nullopt);
  suspect_.reset();
}

void GemmChecksumCheck::read_verdicts() {
  std::optional<StepVerdicts> step;
  {
    const std::lock_guard lock(mutex_);
    step = std::move(pending_);
    pending_.reset();
  }
  if (!step) return;
  auto verdicts = step->on_host;
  if (step->on_device) {
    const auto flat = step->on_device->get();
    for (size_t i = 0; i + 5 <= flat.size(); i += 5) verdicts.push_back({flat[i], flat[i + 1], flat[i + 2], flat[i + 3], flat[i + 4]});
  }
  judge(*step, verdicts);
}

void GemmChecksumCheck::judge(const StepVerdicts& step, const std::vector<std::array<double, 5>>& verdicts) {
  // The last mismatch's re-run: its GEMM's first call in this step.
  if (suspect_) {
    const auto& name = suspect_->name;
    for (size_t i = 0; i < step.calls.size(); ++i)
      if (step.calls[i].name == name) {
        report_suspect(std::move(*suspect_), mismatch(verdicts[i]));
        suspect_.reset();
        break;
      }
  }
  std::vector<size_t> wrong;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    if (mismatch(verdicts[i])) wrong.push_back(i);
    else worst_clean_ratio_ = std::max(worst_clean_ratio_, worst_ratio(verdicts[i]));
  }
  calls_judged_ += int64_t(verdicts.size());
  if (wrong.empty()) return;
  const size_t worst = *std::max_element(wrong.begin(), wrong.end(), [&](size_t a, size_t b) {
    return worst_ratio(verdicts[a]) < worst_ratio(verdicts[b]);
  });
  const auto& call = step.calls[worst];
  const auto& v = verdicts[worst];
  std::vector<std::string> names;
  for (const size_t i : wrong)
    if (names.size() < kNamesListed && std::find(names.begin(), names.end(), step.calls[i].name) == names.end())
      names.push_back(step.calls[i].name);
  const auto [row_is, column_is] = axes(call.pass);
  const auto [m, k, n] = call.shape;
  Finding f{.component = component::rocblas,
            .signature = "gemm_checksum_mismatch",
            .severity = Severity::fail,
            .step = step.step,
            .rank = loop_.rank(),
            .message = fmt::format("{} [{} x {}] x [{} x {}] {} at step {}: checksums off by {:.3g}x their bound at row "
                                   "{} ({}), column {} ({}); {} of the step's {} checked GEMMs wrong",
                                   call.name, m, k, k, n, call.dtype, step.step, worst_ratio(v), int64_t(v[1]), row_is,
                                   int64_t(v[3]), column_is, wrong.size(), verdicts.size()),
            .evidence = {{"gemm", call.name},
                         {"layer", call.layer},
                         {"site", call.site},
                         {"pass", gemm_pass_name(call.pass)},
                         {"shape_mkn", {m, k, n}},
                         {"dtype", call.dtype},
                         {"row", int64_t(v[1])},
                         {"row_is", row_is},
                         {"column", int64_t(v[3])},
                         {"column_is", column_is},
                         {"row_error_over_bound", json_number(v[0])},
                         {"column_error_over_bound", json_number(v[2])},
                         {"bound_factor", kShadowBoundFactor},
                         {"gemms_wrong", wrong.size()},
                         {"gemms_checked", verdicts.size()},
                         {"gemms_wrong_names", names},
                         {"host", host_name()},
                         {"device", call.device}}};
  // A suspect whose GEMM did not run again (an expert no token reached) is reported as it stands.
  if (suspect_) report_suspect(std::move(*suspect_), std::nullopt);
  suspect_ = Suspect{.name = call.name, .finding = std::move(f)};
  const std::lock_guard lock(mutex_);
  recheck_.insert(call.name);
}

nlohmann::json GemmChecksumCheck::report_sections() const {
  return {{"gemm_checksums",
           {{"mode", name_of(cfg_.gemm_checksums)},
            {"calls_judged", calls_judged_},
            {"distinct_gemms", names_.size()},
            {"worst_clean_error_over_bound", worst_clean_ratio_}}}};
}

void GemmChecksumCheck::report_suspect(Suspect suspect, std::optional<bool> wrong_again) {
  {
    const std::lock_guard lock(mutex_);
    recheck_.erase(suspect.name);
  }
  Finding& f = suspect.finding;
  if (!wrong_again) {
    // No second look: the fail stands, unclassified.
    f.evidence["rerun"] = "none: the GEMM did not run again in this run";
    report(std::move(f));
    return;
  }
  f.evidence["rerun"] = "its next call";
  f.evidence["reproducible"] = *wrong_again;
  transients_.apply(f, RerunOutcome{.reproducible = *wrong_again});
  report(std::move(f));
}

}  // namespace rcl
