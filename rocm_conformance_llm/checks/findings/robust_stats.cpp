#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace rcl::stats {

double median(std::vector<double> values) { return percentile(std::move(values), 0.5); }

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return kNaN;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double coefficient_of_variation(const std::vector<double>& values) {
  if (values.size() < 2) return kNaN;
  const double m = mean(values);
  double sq = 0.0;
  for (double v : values) sq += (v - m) * (v - m);
  return std::sqrt(sq / static_cast<double>(values.size() - 1)) / m;
}

double scaled_mad(const std::vector<double>& values) {
  if (values.empty()) return kNaN;
  const double med = median(values);
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::abs(v - med));
  return 1.4826 * median(std::move(deviations));
}

double robust_zscore(double x, const std::vector<double>& baseline, double relative_floor) {
  if (baseline.empty()) return kNaN;
  const double med = median(baseline);
  const double scale = std::max({scaled_mad(baseline), relative_floor * std::abs(med), 1e-12});
  return (x - med) / scale;
}

double difference_noise(const std::vector<double>& values) {
  if (values.size() < 2) return kNaN;
  std::vector<double> steps;
  steps.reserve(values.size() - 1);
  for (size_t i = 1; i < values.size(); ++i) steps.push_back(std::abs(values[i] - values[i - 1]));
  return 1.4826 * median(std::move(steps)) / std::sqrt(2.0);
}

double upper_normal_quantile(double p) {
  p = std::clamp(p, 1e-300, 0.5);
  double lo = 0.0, hi = 40.0;  // bisection on the tail 0.5 * erfc(z / sqrt(2)), decreasing in z
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(mid / std::sqrt(2.0)) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double theil_sen_slope(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) throw std::invalid_argument("theil_sen_slope: x and y differ in length");
  std::vector<double> slopes;
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = i + 1; j < x.size(); ++j)
      if (x[j] != x[i]) slopes.push_back((y[j] - y[i]) / (x[j] - x[i]));
  return median(std::move(slopes));
}

}  // namespace rcl::stats
