// The inline SVG plot the HTML pages draw (report.html's curves over the steps, compare.html's
// runs against their reference): curves or dots, reference lines, finding markers, no script.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace rcl {

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

}  // namespace rcl
