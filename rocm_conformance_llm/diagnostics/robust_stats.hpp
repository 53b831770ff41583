// Outlier-resistant statistics shared by the detectors: a detector's baseline must not be
// dragged by the very spikes it is looking for, so medians, MADs and Theil-Sen slopes are used
// instead of means, standard deviations and least squares.
#pragma once

#include <vector>

namespace rcl::stats {

double median(std::vector<double> values);                   // NaN when empty
double percentile(std::vector<double> values, double q);     // q in [0,1], linear interpolation
double mean(const std::vector<double>& values);
double coefficient_of_variation(const std::vector<double>& values);  // stddev / mean

// Median absolute deviation scaled by 1.4826 so it estimates the standard deviation of
// normally distributed data.
double scaled_mad(const std::vector<double>& values);

// (x - median) / scale, where scale is the scaled MAD floored at `relative_floor` * |median|
// (and a tiny absolute floor) so a perfectly flat baseline does not turn rounding noise into
// an infinite z-score.
double robust_zscore(double x, const std::vector<double>& baseline, double relative_floor);

// Theil-Sen estimator: the median of pairwise slopes of (x_i, y_i). Robust to up to ~29% of
// outliers, which a process RSS or allocator reading regularly contains.
double theil_sen_slope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace rcl::stats
