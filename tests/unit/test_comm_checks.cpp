// The arithmetic of the cross-rank checks on synthetic numbers: canary, parameter fingerprint,
// odd rank out, straggler window, bus bandwidth.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/comm_checks.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

const auto kFloat = torch::TensorOptions().dtype(torch::kFloat);

TEST(CanaryTest, SumOfContributionsIsTheExpectedExactSum) {
  for (const int world : {1, 2, 3, 8, 1024}) {
    torch::Tensor sum = torch::zeros({4096}, kFloat);
    if (world <= 8) {
      for (int r = 0; r < world; ++r) sum += canary_contribution(r, 4096, kFloat);
    } else {
      // Large worlds: the sum in float64 must still be what float32 carries exactly.
      torch::Tensor wide = torch::zeros({4096}, torch::kDouble);
      for (int r = 0; r < world; ++r) wide += canary_contribution(r, 4096, torch::kDouble);
      sum = wide.to(torch::kFloat);
      EXPECT_TRUE(torch::equal(sum.to(torch::kDouble), wide)) << "not exact in float32 at world " << world;
    }
    EXPECT_FALSE(compare_canary(sum, world).has_value()) << "world " << world;
  }
}

TEST(CanaryTest, ReportsTheWrongElements) {
  torch::Tensor sum = canary_expected_sum(4, 1000, kFloat);
  sum[17].add_(1);
  sum[400].fill_(std::numeric_limits<float>::quiet_NaN());
  const auto mismatch = compare_canary(sum, 4);
  ASSERT_TRUE(mismatch.has_value());
  EXPECT_EQ(mismatch->wrong_elements, 2);
  EXPECT_EQ(mismatch->first_index, 17);
  EXPECT_EQ(mismatch->expected, (1 + 17 % 7) * 10);
  EXPECT_EQ(mismatch->got, mismatch->expected + 1);
  // A sum taken as if there were 3 ranks is wrong everywhere for 4.
  EXPECT_EQ(compare_canary(canary_expected_sum(3, 1000, kFloat), 4)->wrong_elements, 1000);
}

std::vector<torch::Tensor> some_parameters() {
  torch::manual_seed(7);
  return {torch::randn({64, 32}), torch::randn({32}), torch::randn({5}).to(torch::kBFloat16),
          torch::randn({3, 3}).to(torch::kDouble)};
}

TEST(FingerprintTest, IdenticalParametersGiveIdenticalFingerprints) {
  const auto a = some_parameters();
  const auto b = some_parameters();
  const ParameterFingerprint fa = fingerprint_parameters(a);
  const ParameterFingerprint fb = fingerprint_parameters(b);
  EXPECT_EQ(fa.hash, fb.hash);
  EXPECT_EQ(fa.sum, fb.sum);
  // Non-contiguous views hash their values, not their storage layout.
  std::vector<torch::Tensor> transposed_back = {a[0].t().contiguous().t(), a[1], a[2], a[3]};
  EXPECT_EQ(fingerprint_parameters(transposed_back).hash, fa.hash);
}

TEST(FingerprintTest, EveryBitAndEveryPositionCounts) {
  const auto base = some_parameters();
  const uint64_t reference = fingerprint_parameters(base).hash;
  // One ulp in a float32, in a bf16, in a float64; a swap of two elements (same sum).
  auto ulp = some_parameters();
  ulp[0][3][5].fill_(std::nextafter(ulp[0][3][5].item<float>(), 1e9f));
  EXPECT_NE(fingerprint_parameters(ulp).hash, reference);
  auto half = some_parameters();
  half[2].view(torch::kShort)[1].add_(1);
  EXPECT_NE(fingerprint_parameters(half).hash, reference);
  auto wide = some_parameters();
  wide[3].view(torch::kLong)[0][0].bitwise_xor_(1);
  EXPECT_NE(fingerprint_parameters(wide).hash, reference);
  auto swapped = some_parameters();
  const torch::Tensor first = swapped[1][0].clone();
  swapped[1][0].copy_(swapped[1][1]);
  swapped[1][1].copy_(first);
  EXPECT_NE(fingerprint_parameters(swapped).hash, reference);
  EXPECT_DOUBLE_EQ(fingerprint_parameters(swapped).sum, fingerprint_parameters(base).sum);
  // Sign of zero: equal as numbers, different bits.
  std::vector<torch::Tensor> zero = {torch::zeros({4})};
  std::vector<torch::Tensor> negative_zero = {-torch::zeros({4})};
  EXPECT_NE(fingerprint_parameters(zero).hash, fingerprint_parameters(negative_zero).hash);
}

TEST(OddRankOutTest, MajorityAndTies) {
  EXPECT_TRUE(ranks_differing_from_majority({5, 5, 5, 5}).empty());
  EXPECT_EQ(ranks_differing_from_majority({5, 5, 9, 5}), std::vector<int>({2}));
  EXPECT_EQ(ranks_differing_from_majority({9, 5, 5, 5}), std::vector<int>({0}));
  EXPECT_EQ(ranks_differing_from_majority({5, 9}), std::vector<int>({1}));  // tie: rank 0 is the reference
  EXPECT_EQ(ranks_differing_from_majority({1, 2, 3}), std::vector<int>({1, 2}));
  EXPECT_EQ(ranks_differing_from_majority({4, 4, 7, 7, 7}), std::vector<int>({0, 1}));
}

TEST(SpreadTest, MinMedianMaxAndSlowest) {
  const StepTimeSpread s = spread({0.10, 0.40, 0.20, 0.30});
  EXPECT_DOUBLE_EQ(s.min_s, 0.10);
  EXPECT_DOUBLE_EQ(s.median_s, 0.25);
  EXPECT_DOUBLE_EQ(s.max_s, 0.40);
  EXPECT_EQ(s.slowest_rank, 1);
}

TEST(StragglerTest, PersistentlySlowRankIsNamedOnce) {
  StragglerTracker tracker(4, StragglerOptions{10, 1.5, 0.002});
  std::vector<int64_t> verdict_steps;
  for (int step = 0; step < 30; ++step) {
    const double jitter = 0.001 * (step % 3);
    const auto v = tracker.add({0.050 + jitter, 0.051, 0.120, 0.049 + jitter});
    if (v) {
      EXPECT_EQ(v->rank, 2);
      EXPECT_EQ(v->late_steps, 10);
      EXPECT_NEAR(v->busy_median_s, 0.120, 1e-9);
      EXPECT_NEAR(v->others_median_s, 0.051, 0.0015);
      verdict_steps.push_back(step);
    }
  }
  EXPECT_EQ(verdict_steps, std::vector<int64_t>({9}));  // first full window, then silent while it persists
}

TEST(StragglerTest, OccasionalSpikesAndJitterAreNotStragglers) {
  StragglerTracker tracker(4, StragglerOptions{10, 1.5, 0.002});
  for (int step = 0; step < 40; ++step) {
    std::vector<double> busy = {0.050, 0.052, 0.049, 0.051};
    if (step % 4 == 0) busy[step % 8 == 0 ? 1 : 3] = 0.200;  // spikes move around, 1 in 4 steps
    EXPECT_FALSE(tracker.add(busy).has_value()) << "step " << step;
  }
  // Microsecond-scale steps: 3x slower but below the absolute gap is noise, not a straggler.
  StragglerTracker tiny(2, StragglerOptions{10, 1.5, 0.002});
  for (int step = 0; step < 20; ++step) EXPECT_FALSE(tiny.add({0.0001, 0.0003}).has_value());
}

TEST(StragglerTest, TwoRanksRecoveryAndRelapse) {
  StragglerTracker tracker(2, StragglerOptions{5, 1.5, 0.002});
  int verdicts = 0;
  const auto feed = [&](int steps, double rank1) {
    for (int i = 0; i < steps; ++i) {
      if (const auto v = tracker.add({0.010, rank1})) {
        EXPECT_EQ(v->rank, 1);
        ++verdicts;
      }
    }
  };
  feed(5, 0.030);
  EXPECT_EQ(verdicts, 1);
  feed(10, 0.010);  // recovered
  EXPECT_EQ(verdicts, 1);
  feed(5, 0.030);  // relapse is news again
  EXPECT_EQ(verdicts, 2);
}

TEST(BusBandwidthTest, NcclTestsFormulas) {
  // 1 GB in 1 s over 4 ranks: all-reduce moves 2(n-1)/n of it per rank.
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(CollectiveKind::all_reduce, 1'000'000'000, 1.0, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(CollectiveKind::all_gather, 1'000'000'000, 1.0, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(CollectiveKind::broadcast, 1'000'000'000, 2.0, 4), 0.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(CollectiveKind::all_reduce, 1'000'000'000, 1.0, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(CollectiveKind::all_reduce, 100, 0.0, 2), 0.0);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
