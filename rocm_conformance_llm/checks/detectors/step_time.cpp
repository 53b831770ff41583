#include "rocm_conformance_llm/checks/detectors/step_time.hpp"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {

namespace {
// A CPU run shares the host's cores (and their SMT siblings) with everything else on it: clean
// runs on a 2-vCPU host under build load (load average 12-16) showed bursts of 2-3x lasting ~10
// steps and a CV of up to 0.65 (bench/false-alarms.md). A real or injected slowdown of a CPU step is judged
// against these floors; a GPU run keeps the configured thresholds.
constexpr double kSharedCoresSlowdownRatio = 4.0;
constexpr double kSharedCoresCv = 1.0;

double slowdown_ratio(const DiagnosticsConfig& cfg, const RunProfile& run) {
  return run.shared_cores ? std::max(cfg.slowdown_ratio_warn, kSharedCoresSlowdownRatio) : cfg.slowdown_ratio_warn;
}
double cv_threshold(const DiagnosticsConfig& cfg, const RunProfile& run) {
  return run.shared_cores ? std::max(cfg.step_time_cv_warn, kSharedCoresCv) : cfg.step_time_cv_warn;
}

// Another process on the run's cores: measured, a clean 200-step smoke run sharing 2 cores
// with a compiler warned `step_time_variance` (CV 1.53) against MIOpen. A quiet host's training
// thread waits ~0-2% of a step for a core; a busy one's 30-90%.
constexpr double kContendedWaitShare = 0.2;
constexpr double kContendedOthersShare = 0.25;  // where the kernel keeps no run-queue wait

bool contended(const HostLoadSample& h) {
  if (h.run_queue_wait_s >= 0 && h.wall_s > 0) return h.run_queue_wait_s >= kContendedWaitShare * h.wall_s;
  return h.others_cpu_share >= kContendedOthersShare;
}

// The host's share of a stretch of steps, as evidence.
nlohmann::json host_figures(std::vector<HostLoadSample>::const_iterator begin,
                            std::vector<HostLoadSample>::const_iterator end) {
  double wall = 0, wait = 0, others = 0;
  int64_t busy = 0;
  bool wait_known = true;
  for (auto h = begin; h != end; ++h) {
    wall += h->wall_s;
    wait += std::max(h->run_queue_wait_s, 0.0);
    others += std::max(h->others_cpu_share, 0.0) * h->wall_s;
    wait_known &= h->run_queue_wait_s >= 0;
    busy += contended(*h);
  }
  return {{"contended_steps", busy},
          {"steps", end - begin},
          {"run_queue_wait_share", wait_known && wall > 0 ? json_number(wait / wall) : nlohmann::json(nullptr)},
          {"others_cpu_share", wall > 0 ? others / wall : 0.0}};
}

// Most of the stretch's steps were slowed by the host.
bool mostly_contended(std::vector<HostLoadSample>::const_iterator begin,
                      std::vector<HostLoadSample>::const_iterator end) {
  return 2 * std::count_if(begin, end, contended) >= end - begin;
}
}  // namespace

void StepTimeDetector::explained_by_host(const std::string& signature, int64_t step, nlohmann::json figures) {
  figures["instead_of"] = signature;
  figures["step"] = step;
  explained_by_host_.push_back(std::move(figures));
}

int64_t StepTimeDetector::cliff_run_length() const { return std::max<int64_t>(3, cfg_.window_steps / 2); }

void StepTimeDetector::on_step(const StepRecord& r) {
  rank_ = r.rank;
  last_step_ = r.step;
  // Judged: the compute. Time inside collectives is RCCL's (and, on several ranks, the slowest
  // peer's). The host's runqueue wait stays in: on a loaded host it is most of the step, and
  // what is left without it is noisier than the step (clean comm runs at a load of 13 on 2
  // cores: 75-95% wait, the rest with a CV of 1.3).
  double in_collectives = 0.0;
  for (const auto& c : r.collectives) in_collectives += c.seconds;
  const double step_s = std::max(r.step_time_s - in_collectives, 0.0);
  if (!first_step_s_) {
    first_step_s_ = step_s;
    first_step_ = r.step;
  }
  if (in_warmup(r)) return;
  steady_s_.push_back(step_s);
  steady_steps_.push_back(r.step);
  steady_host_.push_back(r.host);

  const auto window = static_cast<size_t>(cfg_.window_steps);
  if (!reference_median_) {
    if (steady_s_.size() == window) reference_median_ = stats::median(steady_s_);
    return;
  }
  if (step_s < slowdown_ratio(cfg_, run_) * *reference_median_) {
    slow_run_length_ = 0;
    return;
  }
  if (slow_run_length_++ == 0) slow_run_start_ = r.step;
  // Judge once, when the run is long enough to be persistent. A cliff is abrupt: the run must
  // also be slower than the window just before it, or it is the end of a gradual drift
  // (late_slowdown's business).
  if (slow_run_length_ != cliff_run_length()) return;
  const auto run_begin = steady_s_.end() - slow_run_length_;
  const std::vector<double> run(run_begin, steady_s_.end());
  const auto preceding = std::min<std::ptrdiff_t>(cfg_.window_steps, run_begin - steady_s_.begin());
  const std::vector<double> before(run_begin - preceding, run_begin);
  const double ratio = stats::median(run) / *reference_median_;
  const double jump = stats::median(run) / stats::median(before);
  if (jump < slowdown_ratio(cfg_, run_)) return;
  if (mostly_contended(steady_host_.end() - slow_run_length_, steady_host_.end())) {
    auto figures = host_figures(steady_host_.end() - slow_run_length_, steady_host_.end());
    figures["ratio"] = ratio;
    explained_by_host("step_time_cliff", slow_run_start_, std::move(figures));
    return;
  }
  report(Finding{.component = component::rocblas,
                 .signature = "step_time_cliff",
                 .severity = Severity::warn,
                 .step = slow_run_start_,
                 .rank = r.rank,
                 .message = fmt::format("step time jumped {:.2f}x at step {} and stayed there (reference "
                                        "median {:.4g} s): a GEMM solution / autotuning change",
                                        ratio, slow_run_start_, *reference_median_),
                 .evidence = {{"cliff_step", slow_run_start_},
                              {"ratio", ratio},
                              {"reference_median_s", *reference_median_},
                              {"reference_steps", {steady_steps_.front(), steady_steps_[window - 1]}},
                              {"jump_vs_preceding_window", jump},
                              {"slow_steps_seen", slow_run_length_},
                              {"slow_median_s", stats::median(run)},
                              {"threshold_ratio", slowdown_ratio(cfg_, run_)}}});
}

void StepTimeDetector::finish() {
  if (!reference_median_) return;  // too few post-warm-up steps to judge anything
  const double reference = *reference_median_;
  const auto window = static_cast<size_t>(cfg_.window_steps);

  if (steady_s_.size() >= 2 * window && !reported("step_time_cliff")) {
    const std::vector<double> late(steady_s_.end() - cfg_.window_steps, steady_s_.end());
    const double ratio = stats::median(late) / reference;
    const auto late_host = steady_host_.end() - cfg_.window_steps;
    if (ratio >= slowdown_ratio(cfg_, run_) && mostly_contended(late_host, steady_host_.end())) {
      auto figures = host_figures(late_host, steady_host_.end());
      figures["ratio"] = ratio;
      explained_by_host("late_slowdown", steady_steps_[steady_s_.size() - window], std::move(figures));
    } else if (ratio >= slowdown_ratio(cfg_, run_))
      report(Finding{.component = component::miopen,
                     .signature = "late_slowdown",
                     .severity = Severity::warn,
                     .step = steady_steps_[steady_s_.size() - window],
                     .rank = rank_,
                     .message = fmt::format("the last {} steps are {:.2f}x slower than the post-warm-up "
                                            "window: performance regressed during the run",
                                            window, ratio),
                     .evidence = {{"ratio", ratio},
                                  {"late_median_s", stats::median(late)},
                                  {"reference_median_s", reference},
                                  {"late_steps", {steady_steps_[steady_s_.size() - window], last_step_}},
                                  {"threshold_ratio", slowdown_ratio(cfg_, run_)}}});
  }

  // Judged on the steps the host left alone, when there are a window of them; with fewer, a
  // variance alongside contended steps cannot be told from the host's.
  std::vector<double> quiet;
  for (size_t i = 0; i < steady_s_.size(); ++i)
    if (!contended(steady_host_[i])) quiet.push_back(steady_s_[i]);
  const bool any_contended = quiet.size() < steady_s_.size();
  const double overall_cv = stats::coefficient_of_variation(steady_s_);
  const double cv = quiet.size() >= window ? stats::coefficient_of_variation(quiet) : any_contended ? 0.0 : overall_cv;
  if (overall_cv >= cv_threshold(cfg_, run_) && cv < cv_threshold(cfg_, run_)) {
    auto figures = host_figures(steady_host_.begin(), steady_host_.end());
    figures["cv"] = overall_cv;
    figures["cv_of_uncontended_steps"] = quiet.size() >= window ? json_number(cv) : nlohmann::json(nullptr);
    explained_by_host("step_time_variance", last_step_, std::move(figures));
  }
  if (cv >= cv_threshold(cfg_, run_))
    report(Finding{.component = component::miopen,
                   .signature = "step_time_variance",
                   .severity = Severity::warn,
                   .step = last_step_,
                   .rank = rank_,
                   .message = fmt::format("steady-state step time varies with a coefficient of variation of "
                                          "{:.2f} (p95 {:.4g} s vs median {:.4g} s)",
                                          cv, stats::percentile(steady_s_, 0.95), stats::median(steady_s_)),
                   .evidence = {{"cv", cv},
                                {"threshold", cv_threshold(cfg_, run_)},
                                {"host_contended_steps_left_out", steady_s_.size() - quiet.size()},
                                {"median_s", stats::median(steady_s_)},
                                {"p95_s", stats::percentile(steady_s_, 0.95)},
                                {"max_s", *std::max_element(steady_s_.begin(), steady_s_.end())},
                                {"steps", steady_s_.size()}}});

  const double steady_median = stats::median(steady_s_);
  const double first_ratio = *first_step_s_ / steady_median;
  const double info_ratio = cfg_.first_step_ratio_warn / 5.0;
  // A ratio alone blames healthy GPUs: on the H100 the first smoke/small step (context, BLAS
  // handles, module loading) took 0.2-0.3 s against a steady 3-5 ms, 68-91x. A kernel search
  // without a perf database costs tens of seconds: the warning also needs the excess in seconds.
  const double first_excess_s = *first_step_s_ - steady_median;
  const bool warn = first_ratio >= cfg_.first_step_ratio_warn && first_excess_s >= cfg_.first_step_excess_warn_s;
  if (first_ratio >= info_ratio)
    report(Finding{.component = component::miopen,
                   .signature = "slow_first_step",
                   .severity = warn ? Severity::warn : Severity::info,
                   .step = first_step_,
                   .rank = rank_,
                   .message = fmt::format("the first step took {:.1f}x the steady-state median: kernel "
                                          "search / compilation (MIOpen Find without a perf database?)",
                                          first_ratio),
                   .evidence = {{"ratio", first_ratio},
                                {"first_step_s", *first_step_s_},
                                {"steady_median_s", steady_median},
                                {"warn_ratio", cfg_.first_step_ratio_warn},
                                {"info_ratio", info_ratio},
                                {"warn_excess_s", cfg_.first_step_excess_warn_s}}});

  if (explained_by_host_.empty()) return;
  const auto& first = explained_by_host_.front();
  report(Finding{
      .component = component::host,
      .signature = "host_contention",
      .severity = Severity::info,
      .step = first["step"].get<int64_t>(),
      .rank = rank_,
      .message = fmt::format("other processes took this host's cores: {} step(s) of {} waited for a core, which "
                             "explains the {} (not a ROCm fault); run again on a quiet host to judge step times",
                             std::count_if(steady_host_.begin(), steady_host_.end(), contended), steady_host_.size(),
                             first["instead_of"].get<std::string>()),
      .evidence = {{"explained", explained_by_host_},
                   {"whole_run", host_figures(steady_host_.begin(), steady_host_.end())},
                   {"contended_wait_share", kContendedWaitShare}}});
}

}  // namespace rcl
