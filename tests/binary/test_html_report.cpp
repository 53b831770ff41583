// report.html: every run directory gets a page a person can read offline, with the findings
// marked at their steps. Real runs of the binary (clean, failed, crashed, hung) are loaded in
// headless Chromium and what it rendered is measured; the screenshots go to
// test-output/report_html/ under the test's working directory. The writer in-process:
// tests/unit/test_html_plots.cpp.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/reports/html_report.hpp"
#include "support/browser.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::fresh_dir;
using rcl::testing::read_text;
using rcl::testing::run_cli;

struct BrowserCase {
  std::string name;
  std::string args;
  int exit_code;
  std::string verdict;
  // (signature, step) expected on every plot; step -1: where report.json puts it (a crash is
  // attributed to the step after the last one published).
  std::vector<std::pair<std::string, int64_t>> markers;
  bool has_plots = true;
};

class RenderedReport : public ::testing::TestWithParam<BrowserCase> {};

INSTANTIATE_TEST_SUITE_P(
    Runs, RenderedReport,
    ::testing::Values(
        BrowserCase{"clean", "--steps 6", 0, "PASS", {}},
        BrowserCase{"failed", "--steps 6 --inject nan@step=4", 1, "FAIL", {{"nonfinite_loss", 4}}},
        BrowserCase{
            "crashed", "--steps 6 --inject memory-leak=1000000GiB/step@step=3", 3, "CRASHED", {{"host_out_of_memory", -1}}},
        BrowserCase{"hung", "--steps 60 --inject hang@step=3 --watchdog-timeout 2", 3, "HUNG", {{"hang", 3}}}),
    [](const auto& info) { return info.param.name; });

TEST_P(RenderedReport, ShowsTheVerdictThePlotsAndEveryFindingAtItsStep) {
  const auto& c = GetParam();
  const fs::path dir = fresh_dir("html", c.name);
  const auto r = run_cli(rcl::testing::kSmokeCpu + c.args + " --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, c.exit_code) << r.err;
  ASSERT_TRUE(fs::exists(dir / "report.html")) << r.err;
  const json report = json::parse(read_text(dir / "report.json"));
  // A clean run may warn on a loaded host (timing detectors); it must not fail.
  if (c.verdict == "PASS") ASSERT_TRUE(report["verdict"] == "PASS" || report["verdict"] == "WARN") << report["verdict"];
  else ASSERT_EQ(report["verdict"], c.verdict);
  const size_t findings = report["findings"].size();
  // A CPU run: the page says which components were not exercised, and why.
  const std::string html = read_text(dir / "report.html");
  EXPECT_NE(html.find("<span class=\"badge NOT_RUN\">NOT_RUN</span></td><td class=\"num\">0</td>"), std::string::npos);
  EXPECT_NE(html.find("one rank: no collective crossed ranks"), std::string::npos);
  EXPECT_NE(html.find("id=\"coverage-note\""), std::string::npos);

  const json probe = rcl::testing::probe_rendered_report(dir / "report.html", dir / "browser");
  ASSERT_TRUE(probe.is_object());
  EXPECT_EQ(probe["verdict"], report["verdict"]);
  EXPECT_EQ(probe["finding_rows"], findings);
  if (c.has_plots) {
    std::set<std::string> ids;
    for (const auto& p : probe["plots"]) {
      ids.insert(p["id"].get<std::string>());
      EXPECT_GT(p["width"].get<double>(), 300) << p;
      EXPECT_GT(p["height"].get<double>(), 50) << p;
    }
    for (const char* id : {"plot-loss", "plot-step_time", "plot-tokens_per_s", "plot-memory", "plot-grad_norm"})
      EXPECT_TRUE(ids.count(id)) << id << " not rendered";
    // Every finding on every plot.
    EXPECT_EQ(probe["markers"].size(), findings * probe["plots"].size());
  } else {
    EXPECT_TRUE(probe["plots"].empty());
  }
  for (auto [signature, step] : c.markers) {
    for (const auto& f : report["findings"])
      if (step < 0 && f["signature"] == signature) step = f["step"].get<int64_t>();
    ASSERT_GE(step, 0) << signature << " not in report.json";
    int found = 0;
    for (const auto& m : probe["markers"]) {
      if (m["signature"] != signature || m["x"] != step) continue;
      const json* plot = nullptr;
      for (const auto& p : probe["plots"])
        if (p["id"] == m["plot"]) plot = &p;
      ASSERT_NE(plot, nullptr);
      const auto& p = *plot;
      // Where the browser drew the line, as a share of the plot's width, vs where step `step` belongs.
      const double expected =
          (p["px_left"].get<double>() + (step - p["x_min"].get<double>()) /
                                            (p["x_max"].get<double>() - p["x_min"].get<double>()) *
                                            (p["px_right"].get<double>() - p["px_left"].get<double>())) /
          p["view_width"].get<double>();
      EXPECT_NEAR(m["frac"].get<double>(), expected, 0.005) << m;
      EXPECT_NE(m["title"].get<std::string>().find(signature), std::string::npos) << "hover text names the finding";
      EXPECT_NE(m["title"].get<std::string>().find("evidence"), std::string::npos) << "hover text has the evidence";
      ++found;
    }
    EXPECT_EQ(found, static_cast<int>(probe["plots"].size()))
        << signature << "@" << step << " not marked on every plot";
  }
  const fs::path png = fs::current_path() / "test-output" / "report_html" / (c.name + ".png");
  fs::remove(png);
  rcl::testing::screenshot(dir / "report.html", png, dir / "browser");
  const std::string image = read_text(png);
  ASSERT_GT(image.size(), 10000u) << "screenshot of " << c.name << " at " << png;
  EXPECT_EQ(image.substr(1, 3), "PNG");
  fs::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
