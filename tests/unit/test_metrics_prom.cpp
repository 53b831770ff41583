// metrics.prom's writer in-process, read back with a parser written from the format's spec
// (support/prometheus_text.hpp), and the parser's own refusals. The file at the end of a real
// run: tests/binary/test_prometheus.cpp.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/reports/prometheus.hpp"
#include "support/cli_runner.hpp"
#include "support/prometheus_text.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using rcl::testing::find;
using rcl::testing::parse_exposition;
using rcl::testing::read_text;

TEST(PrometheusParser, RejectsWhatTheFormatForbids) {
  EXPECT_THROW(parse_exposition("a{x=\"1\"} 1"), std::runtime_error);                  // no final newline
  EXPECT_THROW(parse_exposition("a{x=1} 1\n"), std::runtime_error);                    // unquoted
  EXPECT_THROW(parse_exposition("a 1\nb 1\na 2\n"), std::runtime_error);               // family split
  EXPECT_THROW(parse_exposition("a{x=\"1\"} 1\na{x=\"1\"} 2\n"), std::runtime_error);  // same series twice
  EXPECT_THROW(parse_exposition("a{x=\"\\q\"} 1\n"), std::runtime_error);              // bad escape
  EXPECT_THROW(parse_exposition("a 1\n# TYPE a gauge\n"), std::runtime_error);         // TYPE after samples
  EXPECT_THROW(parse_exposition("a one\n"), std::invalid_argument);                    // not a float
  EXPECT_EQ(parse_exposition("# TYPE a gauge\na{x=\"q\\\"\\n\\\\\"} NaN\n")[0].labels.at("x"), "q\"\n\\");
}

TEST(MetricsProm, LabelValuesWithQuotesBackslashesAndNewlinesRoundTrip) {
  PromState state{"node \"7\"\\a\nb",
                  3,
                  StepPoint{.step = 9, .loss = NAN, .step_time_s = 0.5, .tokens = 100},
                  {},
                  Verdict{"HUNG", 3}};
  const auto samples = parse_exposition(prometheus_text(state));
  const auto loss = find(samples, "rcl_loss");
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(loss[0].labels.at("run"), "node \"7\"\\a\nb");
  EXPECT_EQ(loss[0].labels.at("rank"), "3");
  EXPECT_TRUE(std::isnan(loss[0].value));
  EXPECT_EQ(find(samples, "rcl_tokens_per_second")[0].value, 200.0);
  EXPECT_EQ(find(samples, "rcl_verdict", {{"verdict", "HUNG"}})[0].value, 1.0);
  EXPECT_EQ(find(samples, "rcl_verdict", {{"verdict", "PASS"}})[0].value, 0.0);
  EXPECT_TRUE(find(samples, "rcl_component_status").empty()) << "no component status before the end";
}

TEST(MetricsProm, ComponentStatusGaugeAtTheEndSaysWhatWasNotRun) {
  const auto statuses =
      component_statuses({Finding{component::rccl, "straggler_rank", Severity::warn, 2, 0, "slow"}}, {});
  PromState state{"run", 0, std::nullopt, {}, Verdict{"WARN", 0}, statuses};
  const auto samples = parse_exposition(prometheus_text(state));
  EXPECT_EQ(find(samples, "rcl_component_status").size(), 4 * std::size(component::all));
  EXPECT_EQ(find(samples, "rcl_component_status", {{"component", "RCCL"}, {"status", "WARN"}})[0].value, 1.0);
  EXPECT_EQ(find(samples, "rcl_component_status", {{"component", "MIOpen"}, {"status", "NOT_RUN"}})[0].value, 1.0);
  EXPECT_EQ(find(samples, "rcl_component_status", {{"component", "MIOpen"}, {"status", "PASS"}})[0].value, 0.0);
}

TEST(MetricsProm, RewrittenEveryIntervalStepsWithTheFindingsSoFar) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-prom-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  FindingLog log(find_signature);
  PrometheusObserver observer(dir, 0, 2, log);
  StepRecord r;
  r.step = 1;
  observer.on_step(r);
  EXPECT_FALSE(fs::exists(dir / "metrics.prom")) << "step 1 is not a multiple of 2";
  log.add(Finding{component::rccl, "collective_latency_outlier", Severity::warn, 2, 0, "slow"});
  r.step = 2;
  r.loss = 3.5;
  observer.on_step(r);
  auto samples = parse_exposition(read_text(dir / "metrics.prom"));
  EXPECT_EQ(find(samples, "rcl_step")[0].value, 2);
  EXPECT_EQ(find(samples, "rcl_loss")[0].value, 3.5);
  EXPECT_EQ(find(samples, "rcl_run_finished")[0].value, 0);
  EXPECT_TRUE(find(samples, "rcl_verdict").empty());
  EXPECT_EQ(find(samples, "rcl_findings", {{"component", "RCCL"}, {"severity", "warn"}})[0].value, 1);
  EXPECT_EQ(find(samples, "rcl_findings", {{"component", "RCCL"}, {"severity", "fail"}})[0].value, 0);
  EXPECT_EQ(find(samples, "rcl_findings").size(), std::size(component::all) * 3);
  r.step = 3;
  observer.on_step(r);
  samples = parse_exposition(read_text(dir / "metrics.prom"));
  EXPECT_EQ(find(samples, "rcl_step")[0].value, 2) << "step 3 is not rewritten";
  EXPECT_FALSE(fs::exists(dir / "metrics.prom.tmp"));
  fs::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
