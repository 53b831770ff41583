// metrics.prom at the end of a real run, read back with the spec's parser
// (support/prometheus_text.hpp). The writer in-process: tests/unit/test_metrics_prom.cpp.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "support/cli_runner.hpp"
#include "support/prometheus_text.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using rcl::testing::find;
using rcl::testing::parse_exposition;
using rcl::testing::read_text;
using rcl::testing::run_cli;

TEST(MetricsProm, ARunEndsWithItsVerdictAndFindingsByComponent) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-prom-run-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto r = run_cli(rcl::testing::kSmokeCpu +
                         "--steps 6 "
                         "--set diagnostics.prom_interval=2 --inject nan@step=4 --output-dir " +
                         dir.string());
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const auto samples = parse_exposition(read_text(dir / "metrics.prom"));
  EXPECT_EQ(find(samples, "rcl_run_finished")[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_verdict", {{"verdict", "FAIL"}})[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_exit_code")[0].value, 1);
  EXPECT_GE(find(samples, "rcl_findings", {{"component", "rocBLAS/hipBLASLt"}, {"severity", "fail"}})[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_step")[0].labels.at("run"), dir.filename().string());
  EXPECT_GT(find(samples, "rcl_step")[0].value, 3);
  EXPECT_FALSE(find(samples, "rcl_memory_bytes").empty());
  fs::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
