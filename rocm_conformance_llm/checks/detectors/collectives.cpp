#include "rocm_conformance_llm/checks/detectors/collectives.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {

namespace {
constexpr double kMinSpikeRatio = 2.0;
// Latencies of a healthy link still jitter by a few percent: floor the scale there.
constexpr double kLatencyScaleFloor = 0.05;
// CPU ranks all-reduce through Gloo on the host's shared cores, and a collective's time there
// is mostly the wait for the peer the host last kept off a core: clean 2-rank comm runs on a
// loaded 2-core host (bench/false-alarms.md) waited up to 1.3 median steps beyond the usual. There a spike
// must cost this many steps (the factor of the other CPU timing floors: step_time.cpp).
constexpr double kSharedCoresMinSteps = 4.0;
}  // namespace

void CollectiveDetector::on_step(const StepRecord& r) {
  if (in_warmup(r)) return;
  const auto min_samples = static_cast<size_t>(std::max<int64_t>(3, cfg_.window_steps / 2));
  const double threshold = run_threshold(cfg_.collective_latency_zscore);
  const double min_steps = run_.shared_cores ? std::max(cfg_.collective_latency_min_step_fraction, kSharedCoresMinSteps)
                                             : cfg_.collective_latency_min_step_fraction;
  const double min_extra_s = min_steps * stats::median({step_times_.begin(), step_times_.end()});
  step_times_.push_back(r.step_time_s);
  if (static_cast<int64_t>(step_times_.size()) > cfg_.window_steps) step_times_.pop_front();
  for (const auto& c : r.collectives) {
    auto& history = history_[{c.op, c.bytes}];
    if (history.size() >= min_samples) {
      const std::vector<double> baseline(history.begin(), history.end());
      const double median = stats::median(baseline);
      const double z = stats::robust_zscore(c.seconds, baseline, kLatencyScaleFloor);
      if (z >= threshold && c.seconds >= kMinSpikeRatio * median && c.seconds - median >= min_extra_s) {
        report(Finding{.component = component::rccl,
                       .signature = "collective_latency_spike",
                       .severity = Severity::warn,
                       .step = r.step,
                       .rank = r.rank,
                       .message = fmt::format("{} of {} bytes (sequence {}) took {:.3g} s, {:.1f}x its "
                                              "recent median ({:.1f} robust sd)",
                                              c.op, c.bytes, c.sequence, c.seconds, c.seconds / median, z),
                       .evidence = {{"op", c.op},
                                    {"bytes", c.bytes},
                                    {"sequence", c.sequence},
                                    {"seconds", c.seconds},
                                    {"baseline_median_s", median},
                                    {"zscore", z},
                                    {"bus_bandwidth_gbps", c.bus_bandwidth_gbps},
                                    {"threshold_zscore", threshold},
                                    {"min_extra_s", min_extra_s}}});
        continue;
      }
    }
    history.push_back(c.seconds);
    if (static_cast<int64_t>(history.size()) > cfg_.window_steps) history.pop_front();
  }
}

}  // namespace rcl
