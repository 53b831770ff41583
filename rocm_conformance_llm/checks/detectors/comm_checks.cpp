#include "rocm_conformance_llm/checks/detectors/comm_checks.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace rcl {
namespace {

constexpr int64_t kCanaryPeriod = 7;
// Fingerprint: elements hashed per chunk (bounds the temporaries on a GPU), each element's bits
// split into 16-bit lanes and weighted by position modulo a prime below 2^16, so a chunk's
// weighted sum stays below 2^16 * 2^16 * 2^22 = 2^54 and never overflows int64.
constexpr int64_t kHashChunk = int64_t{1} << 22;
constexpr int64_t kWeightModulus = 65521;
constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

torch::Tensor canary_pattern(int64_t numel, const torch::TensorOptions& options) {
  return (torch::arange(numel, torch::TensorOptions().dtype(torch::kLong)).remainder(kCanaryPeriod) + 1).to(options);
}

// Integer type of the same width, to view a float tensor's bits.
torch::ScalarType same_width_integer(int64_t element_size) {
  switch (element_size) {
    case 1: return torch::kByte;
    case 2: return torch::kShort;
    case 4: return torch::kInt;
    default: return torch::kLong;
  }
}

double median_of_sorted(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  if (n == 0) return 0.0;
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return median_of_sorted(values);
}

// Median of every rank's value but rank r's, for all r at once.
std::vector<double> medians_of_others(const std::vector<double>& values) {
  const size_t n = values.size();
  if (n < 2) return std::vector<double>(n, 0.0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> sorted(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = values[order[i]];
  // Without sorted position k, the remaining m = n-1 values' j-th is sorted[j < k ? j : j+1].
  const size_t m = n - 1;
  std::vector<double> result(n);
  for (size_t k = 0; k < n; ++k) {
    const auto at = [&](size_t j) { return sorted[j < k ? j : j + 1]; };
    result[order[k]] = m % 2 ? at(m / 2) : 0.5 * (at(m / 2 - 1) + at(m / 2));
  }
  return result;
}

}  // namespace

torch::Tensor canary_contribution(int rank, int64_t numel, const torch::TensorOptions& options) {
  return canary_pattern(numel, options).mul_(rank + 1);
}

torch::Tensor canary_expected_sum(int world_size, int64_t numel, const torch::TensorOptions& options) {
  const int64_t n = world_size;
  return canary_pattern(numel, options).mul_(n * (n + 1) / 2);
}

std::optional<CanaryMismatch> compare_canary(const torch::Tensor& reduced, int world_size) {
  const torch::Tensor expected = canary_expected_sum(world_size, reduced.numel(), reduced.options());
  const torch::Tensor wrong = reduced.reshape(-1).ne(expected);  // NaN compares unequal: caught
  const int64_t count = wrong.sum().item<int64_t>();
  if (count == 0) return std::nullopt;
  CanaryMismatch mismatch;
  mismatch.wrong_elements = count;
  mismatch.first_index = wrong.nonzero()[0][0].item<int64_t>();
  mismatch.got = reduced.reshape(-1)[mismatch.first_index].item<double>();
  mismatch.expected = expected[mismatch.first_index].item<double>();
  return mismatch;
}

ParameterFingerprint fingerprint_parameters(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  ParameterFingerprint fp;
  fp.hash = kFnvOffset;
  for (const auto& param : params) {
    const torch::Tensor flat = param.detach().reshape(-1);
    const int64_t element_size = static_cast<int64_t>(flat.element_size());
    const int lanes = static_cast<int>(std::max<int64_t>(1, element_size / 2));
    const auto long_options = flat.options().dtype(torch::kLong);
    uint64_t param_hash = static_cast<uint64_t>(flat.numel());
    for (int64_t start = 0; start < flat.numel(); start += kHashChunk) {
      const int64_t length = std::min(kHashChunk, flat.numel() - start);
      const torch::Tensor chunk = flat.narrow(0, start, length);
      fp.sum += chunk.to(torch::kDouble).sum().item<double>();
      const torch::Tensor bits = chunk.view(same_width_integer(element_size)).to(torch::kLong);
      const torch::Tensor weights = torch::arange(start, start + length, long_options).remainder(kWeightModulus) + 1;
      for (int lane = 0; lane < lanes; ++lane) {
        const torch::Tensor piece = bits.bitwise_right_shift(16 * lane).bitwise_and(0xFFFF);
        param_hash = param_hash * kFnvPrime + static_cast<uint64_t>((piece * weights).sum().item<int64_t>());
      }
    }
    fp.hash = (fp.hash ^ param_hash) * kFnvPrime;
  }
  return fp;
}

std::vector<int> ranks_differing_from_majority(const std::vector<int64_t>& values) {
  if (values.empty()) return {};
  std::map<int64_t, int> counts;
  for (const int64_t v : values) ++counts[v];
  int64_t reference = values.front();
  for (const int64_t v : values) {  // rank order: ties keep the lowest rank's value
    if (counts[v] > counts[reference]) reference = v;
  }
  std::vector<int> odd;
  for (size_t r = 0; r < values.size(); ++r) {
    if (values[r] != reference) odd.push_back(static_cast<int>(r));
  }
  return odd;
}

StepTimeSpread spread(const std::vector<double>& per_rank_seconds) {
  StepTimeSpread s;
  if (per_rank_seconds.empty()) return s;
  const auto [lo, hi] = std::minmax_element(per_rank_seconds.begin(), per_rank_seconds.end());
  s.min_s = *lo;
  s.max_s = *hi;
  s.slowest_rank = static_cast<int>(hi - per_rank_seconds.begin());
  s.median_s = median(per_rank_seconds);
  return s;
}

StragglerTracker::StragglerTracker(int world_size, StragglerOptions options)
    : world_size_(world_size), options_(options) {}

std::optional<StragglerVerdict> StragglerTracker::add(const std::vector<double>& busy_s) {
  window_.push_back(busy_s);
  if (static_cast<int>(window_.size()) > options_.window) window_.pop_front();
  if (world_size_ < 2 || static_cast<int>(window_.size()) < options_.window) return std::nullopt;

  std::vector<int> late(world_size_, 0);
  std::vector<std::vector<double>> own(world_size_), others(world_size_);
  for (const auto& step : window_) {
    const std::vector<double> reference = medians_of_others(step);
    for (int r = 0; r < world_size_; ++r) {
      own[r].push_back(step[r]);
      others[r].push_back(reference[r]);
      if (step[r] > options_.ratio * reference[r] && step[r] - reference[r] >= options_.min_gap_s) ++late[r];
    }
  }
  const int needed = static_cast<int>(std::ceil(0.8 * options_.window));
  std::optional<int> straggler;
  for (int r = 0; r < world_size_; ++r) {
    if (late[r] >= needed && (!straggler || median(own[r]) > median(own[*straggler]))) straggler = r;
  }
  if (!straggler) {
    current_.reset();  // recovered: a relapse is news again
    return std::nullopt;
  }
  if (current_ == straggler) return std::nullopt;
  current_ = straggler;
  return StragglerVerdict{*straggler, late[*straggler], options_.window, median(own[*straggler]),
                          median(others[*straggler])};
}

}  // namespace rcl
