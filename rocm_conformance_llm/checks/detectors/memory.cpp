#include "rocm_conformance_llm/checks/detectors/memory.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {

namespace {
// Below this much reserved memory, block rounding alone makes the gap ratio meaningless.
constexpr int64_t kMinReservedForFragmentation = int64_t{64} << 20;
constexpr double kMiB = 1024.0 * 1024.0;
// The process RSS also holds what a run's first dozens of steps settle into (transport buffers,
// allocator arenas): clean 2-rank CPU runs grew 1.1 MiB/step through step 25 (bench/false-alarms.md).
constexpr double kRssSlopeFloor = 2.0 * kMiB;
}  // namespace

std::optional<TrackedMemory> tracked_memory(const MemorySample& m) {
  if (m.allocated_bytes >= 0) return TrackedMemory{m.allocated_bytes, "allocated_bytes"};
  if (m.rss_bytes >= 0) return TrackedMemory{m.rss_bytes, "rss_bytes"};
  return std::nullopt;
}

nlohmann::json memory_to_json(const MemorySample& m) {
  return {{"allocated_bytes", m.allocated_bytes},
          {"reserved_bytes", m.reserved_bytes},
          {"peak_allocated_bytes", m.peak_allocated_bytes},
          {"rss_bytes", m.rss_bytes},
          {"source", m.source}};
}

void MemoryProfile::on_step(const StepRecord& r) {
  if (!first_step_) first_step_ = r.memory;
  const auto tracked = tracked_memory(r.memory);
  const bool has_peak = r.memory.peak_allocated_bytes >= 0;
  const int64_t bytes = has_peak ? r.memory.peak_allocated_bytes : tracked ? tracked->bytes : -1;
  if (bytes <= peak_bytes_) return;
  peak_bytes_ = bytes;
  peak_step_ = r.step;
  peak_figure_ = has_peak ? "peak_allocated_bytes" : tracked->figure;
  peak_ = r.memory;
}

nlohmann::json MemoryProfile::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [point, sample] : setup_) out[point] = memory_to_json(sample);
  if (first_step_) out["after_first_step"] = memory_to_json(*first_step_);
  if (peak_)
    out["peak"] = {
        {"step", peak_step_}, {"figure", peak_figure_}, {"bytes", peak_bytes_}, {"memory", memory_to_json(*peak_)}};
  return out;
}

void MemoryDetector::on_step(const StepRecord& r) {
  if (in_warmup(r)) return;
  if (const auto m = tracked_memory(r.memory)) check_growth(r, *m);
  check_fragmentation(r);
}

void MemoryDetector::check_growth(const StepRecord& r, const TrackedMemory& m) {
  if (m.figure != figure_) {  // never fit a line through two different figures
    figure_ = m.figure;
    steps_.clear();
    bytes_.clear();
  }
  steps_.push_back(static_cast<double>(r.step));
  bytes_.push_back(static_cast<double>(m.bytes));
  const auto window = static_cast<size_t>(cfg_.window_steps);
  if (steps_.size() > 2 * window) {
    steps_.pop_front();
    bytes_.pop_front();
  }
  if (steps_.size() < 2 * window || reported("memory_growth")) return;

  const std::vector<double> x(steps_.begin(), steps_.end()), y(bytes_.begin(), bytes_.end());
  const auto half = static_cast<std::ptrdiff_t>(window);
  const double older = stats::theil_sen_slope({x.begin(), x.begin() + half}, {y.begin(), y.begin() + half});
  const double newer = stats::theil_sen_slope({x.begin() + half, x.end()}, {y.begin() + half, y.end()});
  const double threshold = m.figure == "rss_bytes" ? std::max(cfg_.memory_slope_bytes_per_step_warn, kRssSlopeFloor)
                                                   : cfg_.memory_slope_bytes_per_step_warn;
  if (std::min(older, newer) < threshold) return;
  const double older_floor = *std::min_element(y.begin(), y.begin() + half);
  const double newer_floor = *std::min_element(y.begin() + half, y.end());
  if (newer_floor - older_floor < threshold * static_cast<double>(window)) return;
  const double slope = stats::theil_sen_slope(x, y);
  report(
      Finding{.component = component::allocator,
              .signature = "memory_growth",
              .severity = Severity::warn,
              .step = r.step,
              .rank = r.rank,
              .message = fmt::format("{} grows {:.2f} MiB per step over steps {}..{} (threshold {:.2f} "
                                     "MiB/step): a leak",
                                     m.figure, slope / kMiB, static_cast<int64_t>(x.front()), r.step, threshold / kMiB),
              .evidence = {{"figure", m.figure},
                           {"source", r.memory.source},
                           {"slope_bytes_per_step", slope},
                           {"window_slopes_bytes_per_step", {older, newer}},
                           {"window_floors_bytes", {older_floor, newer_floor}},
                           {"first_step", static_cast<int64_t>(x.front())},
                           {"last_step", r.step},
                           {"first_bytes", static_cast<int64_t>(y.front())},
                           {"last_bytes", static_cast<int64_t>(y.back())},
                           {"threshold_bytes_per_step", threshold},
                           {"memory", memory_to_json(r.memory)}}});
}

void MemoryDetector::check_fragmentation(const StepRecord& r) {
  const auto& m = r.memory;
  const int64_t used = m.peak_allocated_bytes >= 0 ? m.peak_allocated_bytes : m.allocated_bytes;
  if (m.reserved_bytes < kMinReservedForFragmentation || used < 0) return;
  const double ratio = static_cast<double>(m.reserved_bytes - used) / static_cast<double>(m.reserved_bytes);
  if (ratio < cfg_.fragmentation_ratio_warn) return;
  report(Finding{.component = component::allocator,
                 .signature = "allocator_fragmentation",
                 .severity = Severity::warn,
                 .step = r.step,
                 .rank = r.rank,
                 .message = fmt::format("{:.0f}% of the {:.0f} MiB reserved was never in use even at the "
                                        "peak: fragmentation or stranded cached blocks",
                                        100.0 * ratio, static_cast<double>(m.reserved_bytes) / kMiB),
                 .evidence = {{"gap_ratio", ratio},
                              {"threshold", cfg_.fragmentation_ratio_warn},
                              {"used_figure", m.peak_allocated_bytes >= 0 ? "peak_allocated_bytes" : "allocated_bytes"},
                              {"memory", memory_to_json(m)}}});
}

std::optional<Finding> check_memory_after_reload(const MemorySample& before, const MemorySample& after,
                                                 const DiagnosticsConfig& cfg, int64_t step, int rank) {
  const auto b = tracked_memory(before), a = tracked_memory(after);
  if (!b || !a || b->figure != a->figure || before.source != after.source) return std::nullopt;
  const int64_t growth = a->bytes - b->bytes;
  if (static_cast<double>(growth) <= cfg.reload_memory_growth_warn_bytes) return std::nullopt;
  return Finding{.component = component::allocator,
                 .signature = "memory_not_recovered_after_reload",
                 .severity = Severity::warn,
                 .step = step,
                 .rank = rank,
                 .message = fmt::format("{} is {:.1f} MiB higher after the checkpoint reload than before it", a->figure,
                                        static_cast<double>(growth) / kMiB),
                 .evidence = {{"figure", a->figure},
                              {"growth_bytes", growth},
                              {"tolerance_bytes", cfg.reload_memory_growth_warn_bytes},
                              {"before", memory_to_json(before)},
                              {"after", memory_to_json(after)}}};
}

}  // namespace rcl
