#include "rocm_conformance_llm/checks/detectors/collective_check.hpp"

#include <algorithm>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {
namespace {

constexpr size_t kHistory = 20;    // latencies kept per case (the report's history too)
constexpr size_t kMinHistory = 2;  // earlier batteries needed before a case can be slow
// CPU ranks: Gloo on cores the host shares, where a collective often waits for a peer the host
// kept off a core for tens of milliseconds (bench/false-alarms.md).
constexpr double kSharedCoresMinExtraS = 0.2;
constexpr double kDefaultSlowAllToAllS = 0.5;

}  // namespace

CollectiveCheckOptions CollectiveCheckOptions::from(const TrainingConfig& cfg, const DiagnosticsConfig& diag,
                                                    bool shared_cores) {
  CollectiveCheckOptions o;
  o.interval = cfg.collective_check_interval;
  o.max_bytes = static_cast<int64_t>(cfg.collective_check_max_mb * 1048576.0);
  o.seed = cfg.seed;
  o.slow_ratio = diag.collective_slow_ratio;
  o.slow_min_extra_s = shared_cores ? std::max(diag.collective_slow_min_extra_s, kSharedCoresMinExtraS)
                                    : diag.collective_slow_min_extra_s;
  o.collective_timeout_s = cfg.collective_timeout_s;
  return o;
}

CollectiveCheck::CollectiveCheck(const DiagnosticsConfig& diag, FindingLog& log,
                                 std::shared_ptr<const GradientSync> sync, CollectiveCheckOptions options,
                                 const FaultPlan* faults, LoopAccess* loop)
    : Detector(diag, log),
      checks_(std::move(sync)),
      options_(options),
      faults_(faults),
      loop_(loop),
      cases_(battery_cases(battery_sizes(options.max_bytes))),
      history_(cases_.size()) {}

void CollectiveCheck::preflight() { run_battery_at(0); }

void CollectiveCheck::on_step(const StepRecord& record) {
  if (options_.interval <= 0 || record.step % options_.interval != 0) return;
  // Its collectives are the cross-rank checks' phase: a hang here is named so.
  if (loop_) loop_->enter_phase(phase::checksum, record.step);
  run_battery_at(record.step);
}

void CollectiveCheck::run_battery_at(int64_t step) {
  BatteryFaults planted;
  if (faults_) {
    const int rank = checks_.world().rank;
    planted.wrong_shard = faults_->fires(FaultKind::collective_corrupt, step, rank);
    if (faults_->fires(FaultKind::collective_hang, step, rank))
      planted.stall_before_reduce_scatter_s = 2.5 * options_.collective_timeout_s;
    if (const FaultSpec* slow = faults_->active(FaultKind::slow_all_to_all, step, rank))
      planted.slow_all_to_all_s = slow->seconds > 0 ? slow->seconds : kDefaultSlowAllToAllS;
  }
  CollectiveBatteryResult result =
      checks_.run_collective_battery(cases_, options_.seed + static_cast<uint64_t>(step), planted);
  ++batteries_;
  for (auto& f : result.findings) {
    f.step = step;  // the battery's step: records are published while the next step runs
    report(std::move(f));
  }

  std::vector<std::string> slow;
  nlohmann::json slow_evidence = nlohmann::json::array();
  for (size_t i = 0; i < result.rows.size(); ++i) {
    const CollectiveCheckRow& row = result.rows[i];
    CaseHistory& h = history_[i];
    h.route = row.route;
    h.last_seconds = row.seconds;
    ++h.runs;
    if (!row.wrong_ranks.empty()) ++h.wrong_runs;
    if (h.seconds.size() >= kMinHistory) {
      const double median = stats::median({h.seconds.begin(), h.seconds.end()});
      if (row.seconds >= options_.slow_ratio * median && row.seconds - median >= options_.slow_min_extra_s) {
        slow.push_back(fmt::format("{} {:.3g} s vs median {:.3g} s ({:.3g} GB/s bus bandwidth)", row.c.name(),
                                   row.seconds, median, row.bus_bandwidth_gbps));
        slow_evidence.push_back({{"case", row.c.name()},
                                 {"kind", to_string(row.c.kind)},
                                 {"dtype", c10::toString(row.c.dtype)},
                                 {"bytes", row.c.bytes},
                                 {"seconds", row.seconds},
                                 {"median_s", median},
                                 {"bus_bandwidth_gbps", row.bus_bandwidth_gbps}});
        continue;  // a slow time never becomes the baseline
      }
    }
    h.seconds.push_back(row.seconds);
    if (h.seconds.size() > kHistory) h.seconds.pop_front();
  }
  if (!slow.empty()) {
    report(Finding{
        .component = component::rccl,
        .signature = "collective_slow",
        .severity = Severity::warn,
        .step = step,
        .rank = checks_.world().rank,
        .message =
            fmt::format("{} collective case{} slow in the battery at step {} (>= {:g}x their "
                        "median, slowest rank's time): {}",
                        slow.size(), slow.size() > 1 ? "s" : "", step, options_.slow_ratio, fmt::join(slow, "; ")),
        .evidence = {
            {"slow", slow_evidence}, {"ratio", options_.slow_ratio}, {"min_extra_s", options_.slow_min_extra_s}}});
  }
}

nlohmann::json CollectiveCheck::report_sections() const {
  nlohmann::json cases = nlohmann::json::array();
  for (size_t i = 0; i < cases_.size(); ++i) {
    const BatteryCase& c = cases_[i];
    const CaseHistory& h = history_[i];
    if (h.runs == 0) continue;
    const double median = h.seconds.empty() ? h.last_seconds : stats::median({h.seconds.begin(), h.seconds.end()});
    cases.push_back(
        {{"kind", to_string(c.kind)},
         {"reduce_op", is_reduction(c.kind) ? to_string(c.reduce) : ""},
         {"dtype", c10::toString(c.dtype)},
         {"bytes", c.bytes},
         {"route", h.route},
         {"runs", h.runs},
         {"verified", h.wrong_runs == 0},
         {"wrong_runs", h.wrong_runs},
         {"latency_s", median},
         {"latency_history_s", std::vector<double>(h.seconds.begin(), h.seconds.end())},
         {"bus_bandwidth_gbps", bus_bandwidth_gbps(c.kind, c.bytes, median, checks_.world().size)},
         {"last_bus_bandwidth_gbps", bus_bandwidth_gbps(c.kind, c.bytes, h.last_seconds, checks_.world().size)}});
  }
  if (cases.empty()) return nlohmann::json::object();
  return {
      {"collectives",
       {{"world_size", checks_.world().size}, {"batteries", batteries_}, {"seed", options_.seed}, {"cases", cases}}}};
}

}  // namespace rcl
