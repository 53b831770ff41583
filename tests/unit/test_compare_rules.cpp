// `compare`'s group rules on hand-made rows: a loss trajectory held to its configuration's
// bitwise majority, throughput flagged only beyond both the ratio and the robust z.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/reports/compare.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

RunRow row(const std::string& name, const std::string& config, const std::string& loss, double tokens_per_s) {
  RunRow r;
  r.name = name;
  r.verdict = "PASS";
  r.outcome = "completed";
  r.config = config;
  r.loss_trajectory = loss;
  r.metrics = {{"tokens_per_s", tokens_per_s}};
  return r;
}

TEST(CompareRules, LossTrajectoryMustMatchTheBitwiseMajorityOfItsConfig) {
  std::vector<RunRow> rows = {row("a", "c1", "x", 100), row("b", "c1", "x", 100), row("c", "c1", "y", 100),
                              row("d", "c2", "p", 100), row("e", "c2", "q", 100)};
  judge_runs(rows, default_compare_rules(), group_reference(rows));
  EXPECT_TRUE(rows[0].flags.empty());
  EXPECT_TRUE(rows[1].flags.empty());
  ASSERT_EQ(rows[2].flags.size(), 1u);
  EXPECT_NE(rows[2].flags[0].find("loss trajectory (bitwise)"), std::string::npos);
  // c2 has no majority (different seeds, say): nothing to hold its runs to.
  EXPECT_TRUE(rows[3].flags.empty());
  EXPECT_TRUE(rows[4].flags.empty());
}

TEST(CompareRules, NeedsBothTheRatioAndTheRobustZ) {
  // A tight group: 0.95x the median is far in robust z but within the 0.9x ratio: not flagged.
  std::vector<RunRow> rows = {row("a", "c", "", 1000), row("b", "c", "", 1001), row("c", "c", "", 999),
                              row("d", "c", "", 950)};
  judge_runs(rows, default_compare_rules(), group_reference(rows));
  for (const auto& r : rows) EXPECT_TRUE(r.flags.empty()) << r.name;
  // A noisy group: 700 is 0.76x the median, beyond the ratio but within the spread: not flagged.
  rows = {row("a", "c", "", 1000), row("b", "c", "", 700), row("c", "c", "", 1300), row("d", "c", "", 850)};
  judge_runs(rows, default_compare_rules(), group_reference(rows));
  for (const auto& r : rows) EXPECT_TRUE(r.flags.empty()) << r.name;
  rows = {row("a", "c", "", 1000), row("b", "c", "", 1010), row("c", "c", "", 990), row("d", "c", "", 500)};
  judge_runs(rows, default_compare_rules(), group_reference(rows));
  EXPECT_EQ(rows[3].flags.size(), 1u);
  EXPECT_TRUE(rows[0].flags.empty() && rows[1].flags.empty() && rows[2].flags.empty());
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
