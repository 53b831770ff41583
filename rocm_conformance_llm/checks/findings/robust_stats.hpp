// Outlier-resistant statistics shared by the detectors: a detector's baseline must not be
// dragged by the very spikes it is looking for, so medians, MADs and Theil-Sen slopes are used
// instead of means, standard deviations and least squares.
#pragma once

#include <cstring>
#include <limits>
#include <vector>

namespace rcl::stats {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Bit for bit the same double (NaN equal to the same NaN; -0 unlike +0): what a deterministic
// re-run must reproduce.
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

double median(std::vector<double> values);                // NaN when empty
double percentile(std::vector<double> values, double q);  // q in [0,1], linear interpolation
double mean(const std::vector<double>& values);
double coefficient_of_variation(const std::vector<double>& values);  // stddev / mean

// Median absolute deviation scaled by 1.4826 so it estimates the standard deviation of
// normally distributed data.
double scaled_mad(const std::vector<double>& values);

// (x - median) / scale, where scale is the scaled MAD floored at `relative_floor` * |median|
// (and a tiny absolute floor) so a perfectly flat baseline does not turn rounding noise into
// an infinite z-score.
double robust_zscore(double x, const std::vector<double>& baseline, double relative_floor);

// The noise of a series estimated from its step-to-step differences: 1.4826 * median |x_i -
// x_{i-1}| / sqrt(2), the standard deviation of independent noise around a trend. Unlike the
// MAD of the levels it is neither inflated by a trend nor fooled by a few flat steps; what
// dropout, drop-path and small batches add to a loss shows up in it directly. NaN below 2 values.
double difference_noise(const std::vector<double>& values);

// z with P(Z > z) = p for a standard normal Z (p clamped to [1e-300, 0.5]).
double upper_normal_quantile(double p);

// Theil-Sen estimator: the median of pairwise slopes of (x_i, y_i). Robust to up to ~29% of
// outliers, which a process RSS or allocator reading regularly contains.
double theil_sen_slope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace rcl::stats
