#include "rocm_conformance_llm/reports/run_summary.hpp"

#include <algorithm>
#include <cmath>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

namespace rcl {

std::optional<std::pair<int64_t, std::string>> peak_memory_figure(const MemorySample& m) {
  if (m.peak_allocated_bytes >= 0) return std::pair{m.peak_allocated_bytes, std::string("peak_allocated_bytes")};
  if (m.allocated_bytes >= 0) return std::pair{m.allocated_bytes, std::string("allocated_bytes")};
  if (m.rss_bytes >= 0) return std::pair{m.rss_bytes, std::string("rss_bytes")};
  return std::nullopt;
}

StepPoint make_step_point(const StepRecord& r) {
  StepPoint p;
  p.step = r.step;
  p.loss = r.loss;
  p.step_time_s = r.step_time_s;
  for (const auto& c : r.collectives) p.collective_s += c.seconds;
  p.tokens = r.tokens;
  p.op_counts = r.op_counts;
  if (const auto peak = peak_memory_figure(r.memory)) {
    p.peak_memory_bytes = peak->first;
    p.memory_figure = peak->second;
  }
  return p;
}

nlohmann::json summarize_steps(const std::vector<StepPoint>& steps, int64_t warmup_steps) {
  nlohmann::json j = {{"steps", steps.size()}};
  if (steps.empty()) return j;
  j["first_step"] = steps.front().step;
  j["last_step"] = steps.back().step;

  // Timing figures cover post-warm-up steps; a run shorter than its warm-up uses every step.
  const bool has_steady = steps.back().step > warmup_steps;
  std::vector<double> losses, times, steady_rates;
  double steady_tokens = 0.0, steady_time = 0.0;
  for (const auto& p : steps) {
    losses.push_back(p.loss);
    if (has_steady && p.step <= warmup_steps) continue;
    times.push_back(p.step_time_s);
    steady_tokens += static_cast<double>(p.tokens);
    steady_time += p.step_time_s;
    if (p.step_time_s > 0) steady_rates.push_back(static_cast<double>(p.tokens) / p.step_time_s);
  }
  double min_loss = INFINITY;
  for (double l : losses)
    if (std::isfinite(l)) min_loss = std::min(min_loss, l);
  j["loss"] = {
      {"first", json_number(losses.front())}, {"last", json_number(losses.back())}, {"min", json_number(min_loss)}};
  j["step_time_s"] = {{"median", stats::median(times)},
                      {"p95", stats::percentile(times, 0.95)},
                      {"cv", json_number(stats::coefficient_of_variation(times))},
                      {"max", *std::max_element(times.begin(), times.end())}};
  j["tokens_per_s"] = {{"overall", steady_time > 0 ? steady_tokens / steady_time : 0.0},
                       {"median", json_number(stats::median(steady_rates))}};
  const auto peak = std::max_element(steps.begin(), steps.end(), [](const StepPoint& a, const StepPoint& b) {
    return a.peak_memory_bytes < b.peak_memory_bytes;
  });
  j["peak_memory"] = {{"bytes", peak->peak_memory_bytes}, {"figure", peak->memory_figure}};
  return j;
}

void RunSummary::on_step(const StepRecord& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  steps_.push_back(make_step_point(r));
  last_memory_ = r.memory;
}

std::vector<StepPoint> RunSummary::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_;
}

int64_t RunSummary::last_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steps_.empty() ? 0 : steps_.back().step;
}

std::optional<MemorySample> RunSummary::last_memory() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_memory_;
}

}  // namespace rcl
