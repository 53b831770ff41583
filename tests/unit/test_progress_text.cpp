// The terminal status line's text: where the run is, its rate, the ETA and the findings so far.
// On a real pseudo-terminal and in redirected output: tests/binary/test_progress.cpp.
#include <gtest/gtest.h>

#include "rocm_conformance_llm/reports/progress.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;

TEST(Progress, TextSaysWhereTheRunIsTheRateTheEtaAndTheFindings) {
  const std::string line = format_progress({.step = 15,
                                            .total_steps = 60,
                                            .elapsed_s = 30,
                                            .tokens_per_s = 1234.4,
                                            .mean_step_time_s = 2.0,
                                            .info = 1,
                                            .warn = 2,
                                            .fail = 0});
  EXPECT_EQ(line, "step 15/60 (25%) | 1234 tok/s | ETA 1:30 | findings: 0 fail, 2 warn, 1 info");
  // With a time limit the ETA is the sooner end.
  const std::string limited = format_progress({.step = 15,
                                               .total_steps = 1000,
                                               .elapsed_s = 30,
                                               .max_duration_s = 90,
                                               .tokens_per_s = 10,
                                               .mean_step_time_s = 2.0});
  EXPECT_NE(limited.find("0:30 of 1:30"), std::string::npos) << limited;
  EXPECT_NE(limited.find("ETA 1:00"), std::string::npos) << limited;
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
