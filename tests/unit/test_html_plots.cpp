// report.html's writer in-process: a long series keeps its spike and every marker, and a
// 100k-step run's page stays small and keeps every finding. Real runs of the binary rendered in
// headless Chromium: tests/binary/test_html_report.cpp.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/reports/html_report.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::count_of;
using rcl::testing::fresh_dir;

TEST(HtmlReport, PlotKeepsASpikeOfALongSeriesAndEveryMarker) {
  PlotSpec plot{"loss", "loss"};
  PlotSeries s{"train"};
  for (int step = 1; step <= 100000; ++step) {
    s.x.push_back(step);
    s.y.push_back(step == 54321 ? 50.0 : 2.0 + 0.001 * std::sin(step));
  }
  plot.series.push_back(s);
  for (int i = 0; i < 300; ++i) plot.markers.push_back({100.0 * (i + 1), "warn", "loss_spike", "t", "#finding-0"});
  const std::string svg = svg_plot(plot, 1000);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("data-points=\"(\\d+)\"")));
  EXPECT_LE(std::stoul(m[1]), 1000u);
  EXPECT_GT(std::stoul(m[1]), 500u);
  // The spike is the top of the y range: some point of the path sits on the plot's top edge.
  EXPECT_NE(svg.find(" 28.0"), std::string::npos);
  EXPECT_EQ(count_of(svg, "class=\"marker sev-warn\""), 300u);
}

TEST(HtmlReport, AHundredThousandStepRunStaysSmallAndKeepsEveryFinding) {
  const fs::path dir = fresh_dir("html", "100k");
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "metrics.jsonl");
    for (int step = 1; step <= 100000; ++step)
      out << json{{"step", step},
                  {"loss", 3.0 / std::sqrt(step)},
                  {"step_time_s", 0.01},
                  {"tokens_per_s", 5e4},
                  {"grad_norm", 0.5},
                  {"loss_scale", 1.0},
                  {"memory", {{"rss_bytes", 1 << 30}}}}
                 .dump()
          << "\n";
  }
  json report = {{"verdict", "WARN"}, {"outcome", "completed"}, {"findings", json::array()}};
  for (int i = 0; i < 250; ++i)
    report["findings"].push_back({{"component", "ROCr allocator"},
                                  {"signature", "memory_growth"},
                                  {"severity", "warn"},
                                  {"step", 400 * (i + 1)},
                                  {"rank", 0},
                                  {"message", "m"},
                                  {"evidence", {{"i", i}}}});
  const std::string html = report_html(report, dir / "metrics.jsonl");
  EXPECT_LT(html.size(), 3u << 20) << "report.html of a 100k-step run should stay a few MB at most";
  EXPECT_EQ(count_of(html, "<tr id=\"finding-"), 250u);
  EXPECT_EQ(count_of(html, "<svg class=\"plot\""), 5u);  // loss, step time, tokens/s, memory, grad norm
  EXPECT_EQ(count_of(html, "class=\"marker sev-warn\""), 250u * 5);
  fs::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
