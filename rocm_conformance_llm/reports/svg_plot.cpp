// svg_plot: a plot's axes, ticks, curves and markers as inline SVG, apart from the pages that
// use it (html_report.cpp, compare_output.cpp) and their tables.
#include "rocm_conformance_llm/reports/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/html_parts.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl {

namespace {
using html_parts::num;
using html_parts::px;
using stats::kNaN;
// Plot geometry in SVG user units (the page scales them to its width).
constexpr double kWidth = 960, kHeight = 230, kLeft = 72, kRight = 944, kTop = 28, kBottom = 200;
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"};

// About `n` round-numbered ticks covering [lo, hi], at least `min_step` apart (1 for steps and
// run numbers: no tick at step 2.5).
std::vector<double> nice_ticks(double lo, double hi, int n, double min_step = 0) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / magnitude;
  const double step = std::max(min_step, (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * magnitude);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

// Per bucket of consecutive points, the lowest and the highest finite one (in x order) and a gap
// where a non-finite value was: the curve's shape, spikes included, at a bounded size.
PlotSeries downsample(const PlotSeries& s, size_t max_points) {
  const size_t n = s.x.size();
  if (n <= max_points || max_points < 4) return s;
  const size_t bucket = (2 * n + max_points - 1) / max_points;
  PlotSeries out{s.name, {}, {}, s.points};
  for (size_t begin = 0; begin < n; begin += bucket) {
    const size_t end = std::min(n, begin + bucket);
    size_t lo = end, hi = end;
    bool gap = false;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(s.y[i])) {
        gap = true;
        continue;
      }
      if (lo == end || s.y[i] < s.y[lo]) lo = i;
      if (hi == end || s.y[i] > s.y[hi]) hi = i;
    }
    std::vector<size_t> keep;
    if (lo != end) keep.push_back(lo);
    if (hi != end && hi != lo) keep.push_back(hi);
    std::sort(keep.begin(), keep.end());
    if (gap) {
      out.x.push_back(s.x[begin]);
      out.y.push_back(kNaN);
    }
    for (size_t i : keep) {
      out.x.push_back(s.x[i]);
      out.y.push_back(s.y[i]);
    }
  }
  return out;
}

}  // namespace

std::string svg_plot(const PlotSpec& plot, size_t max_points_per_series) {
  std::vector<PlotSeries> series;
  for (const auto& s : plot.series) series.push_back(downsample(s, max_points_per_series));

  double x_min = INFINITY, x_max = -INFINITY, y_min = INFINITY, y_max = -INFINITY;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x_min = std::min(x_min, s.x[i]);
      x_max = std::max(x_max, s.x[i]);
      if (std::isfinite(s.y[i])) {
        y_min = std::min(y_min, s.y[i]);
        y_max = std::max(y_max, s.y[i]);
      }
    }
  for (const auto& m : plot.markers) {
    x_min = std::min(x_min, m.x);
    x_max = std::max(x_max, m.x);
  }
  for (const auto& [label, y] : plot.reference_lines) {
    y_min = std::min(y_min, y);
    y_max = std::max(y_max, y);
  }
  if (!std::isfinite(x_min)) x_min = x_max = 0;
  if (x_max <= x_min) x_max = x_min + 1;
  if (!std::isfinite(y_min)) y_min = y_max = 0;
  // Values over more than three decades (a gradient norm that overflowed) read on a log axis.
  const bool log_y = y_min > 0 && y_max / y_min > 1e3;
  auto ty = [&](double y) { return log_y ? std::log10(y) : y; };
  double lo = ty(y_min), hi = ty(y_max);
  if (hi <= lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.05;
    lo -= pad;
    hi += pad;
  }
  auto sx = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * (kRight - kLeft); };
  auto sy = [&](double y) { return kBottom - (ty(y) - lo) / (hi - lo) * (kBottom - kTop); };

  std::string svg = fmt::format(
      "<svg class=\"plot\" id=\"plot-{}\" viewBox=\"0 0 {} {}\" xmlns=\"http://www.w3.org/2000/svg\" "
      "data-x-min=\"{}\" data-x-max=\"{}\" data-px-left=\"{}\" data-px-right=\"{}\" data-log-y=\"{}\">\n"
      "<text class=\"title\" x=\"{}\" y=\"16\">{}{}</text>\n",
      xml_escape(plot.id), kWidth, kHeight, num(x_min), num(x_max), kLeft, kRight, log_y ? 1 : 0, kLeft,
      xml_escape(plot.title), log_y ? " (log scale)" : "");
  for (double t : nice_ticks(lo, hi, 4)) {
    const double y = kBottom - (t - lo) / (hi - lo) * (kBottom - kTop);
    svg += fmt::format(
        "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\" "
        "text-anchor=\"end\">{}</text>\n",
        kLeft, kRight, px(y), px(y), kLeft - 4, px(y + 4), log_y ? num(std::pow(10.0, t)) : num(t));
  }
  for (double t : nice_ticks(x_min, x_max, 8, 1))
    svg += fmt::format(
        "<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/><text x=\"{0}\" y=\"{3}\" "
        "text-anchor=\"middle\">{4}</text>\n",
        px(sx(t)), kBottom, kBottom + 4, kBottom + 16, num(t));
  svg += fmt::format(
      "<line class=\"axis\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\"/><line class=\"axis\" "
      "x1=\"{0}\" x2=\"{0}\" y1=\"{3}\" y2=\"{2}\"/><text x=\"{1}\" y=\"{4}\" text-anchor=\"end\">{5}"
      "</text>\n",
      kLeft, kRight, kBottom, kTop, kBottom + 28, xml_escape(plot.x_label));
  for (const auto& [label, y] : plot.reference_lines)
    svg += fmt::format(
        "<line class=\"reference\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\"><title>{3} {4}</title>"
        "</line><text x=\"{1}\" y=\"{5}\" text-anchor=\"end\">{3}</text>\n",
        kLeft, kRight, px(sy(y)), xml_escape(label), num(y), px(sy(y) - 3));

  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    const char* color = kPalette[k % std::size(kPalette)];
    if (s.points) {
      svg += fmt::format("<g class=\"points\" data-series=\"{}\" fill=\"{}\">", xml_escape(s.name), color);
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.y[i]))
          svg += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\"><title>{} {}: {}</title></circle>", px(sx(s.x[i])),
                             px(sy(s.y[i])), xml_escape(plot.x_label), num(s.x[i]), num(s.y[i]));
      svg += "</g>\n";
    } else {
      std::string d;
      bool pen_down = false;
      for (size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isfinite(s.y[i])) {
          pen_down = false;
          continue;
        }
        d += fmt::format("{}{} {}", pen_down ? "L" : "M", px(sx(s.x[i])), px(sy(s.y[i])));
        pen_down = true;
      }
      svg += fmt::format("<path class=\"curve\" data-series=\"{}\" data-points=\"{}\" stroke=\"{}\" d=\"{}\"/>\n",
                         xml_escape(s.name), s.x.size(), color, d);
      // Short series (and a lone point, which a path does not draw) also get their dots.
      if (s.x.size() <= 60)
        for (size_t i = 0; i < s.x.size(); ++i)
          if (std::isfinite(s.y[i]))
            svg +=
                fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2\" fill=\"{}\"/>", px(sx(s.x[i])), px(sy(s.y[i])), color);
      // A non-finite value has no place on the axis: a red tick under the top edge says where.
      for (size_t i = 0; i < s.x.size(); ++i)
        if (!std::isfinite(s.y[i]))
          svg += fmt::format(
              "<path class=\"nonfinite\" d=\"M{0} {1}l-4 -6h8z\"><title>{2} {3}: {4} not finite"
              "</title></path>\n",
              px(sx(s.x[i])), kTop + 6, xml_escape(plot.x_label), num(s.x[i]), xml_escape(s.name));
    }
    svg += fmt::format("<text x=\"{}\" y=\"16\" text-anchor=\"end\" fill=\"{}\">&#9632; {}</text>\n",
                       kRight - 130 * static_cast<double>(k), color, xml_escape(s.name));
  }
  for (const auto& m : plot.markers) {
    const std::string x = px(sx(m.x));
    svg += fmt::format(
        "<a href=\"{0}\" class=\"marker sev-{1}\" data-x=\"{2}\" data-signature=\"{3}\">"
        "<line class=\"mline\" x1=\"{4}\" x2=\"{4}\" y1=\"{5}\" y2=\"{6}\"/><line class=\"mhit\" "
        "x1=\"{4}\" x2=\"{4}\" y1=\"{5}\" y2=\"{6}\"/><title>{7}</title></a>\n",
        xml_escape(m.href), xml_escape(m.severity), num(m.x), xml_escape(m.signature), x, kTop, kBottom,
        xml_escape(m.tooltip));
  }
  return svg + "</svg>\n";
}

}  // namespace rcl
