// report.html: one self-contained page per run (no script, font or stylesheet from anywhere but
// the page itself, so it opens offline on an air-gapped cluster): the verdict and component
// table, every finding, plots over steps drawn as inline SVG with every finding marked at its
// step, the stress modes, the config diff from the preset and the environment. Also the page
// shell and the plot that `compare` (compare.hpp) draws its page with.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

// A complete page: `title`, the shared inline stylesheet, `body`. Text goes in through
// report.hpp's xml_escape, which is also right for HTML content and attributes.
std::string html_page(const std::string& title, const std::string& body);

// One curve (or, with `points`, unconnected dots: validation losses, one value per run).
struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // NaN/Inf values are gaps
  bool points = false;
};

// A vertical mark at `x`: a finding at its step. Hover shows `tooltip` (SVG <title>), a click
// follows `href` (the finding's row in the findings table).
struct PlotMarker {
  double x = 0;
  std::string severity;  // info | warn | fail: the colour
  std::string signature;
  std::string tooltip;
  std::string href;
};

struct PlotSpec {
  std::string id;  // the svg's id: "plot-<id>"
  std::string title;
  std::string x_label = "step";
  // Initialised, so a spec may name only its first fields (-Wmissing-field-initializers).
  std::vector<PlotSeries> series{};
  std::vector<std::pair<std::string, double>> reference_lines{};  // (label, y), e.g. the loss floor
  std::vector<PlotMarker> markers{};
};

// Inline SVG. Each series is cut to at most `max_points_per_series` points (per-bucket min and
// max, so a one-step spike survives); markers are never dropped. The <svg> carries data-x-min,
// data-x-max, data-px-left and data-px-right: a marker at x sits at
// px_left + (x - x_min) / (x_max - x_min) * (px_right - px_left).
std::string svg_plot(const PlotSpec& plot, size_t max_points_per_series = 1000);

// The run's page from its report (the object ReportWriter writes to report.json) and its
// metrics file (metrics.jsonl or metrics.rank<N>.jsonl; missing or truncated lines are fine:
// a crashed run has fewer).
std::string report_html(const nlohmann::json& report, const std::filesystem::path& metrics_path);

}  // namespace rcl
