// The number formats the three HTML pages share (report.html, compare.html, job_report.html), in
// one place so a figure and an SVG coordinate read the same on every page. Internal to reports/.
#pragma once

#include <string>

#include <fmt/format.h>

namespace rcl::html_parts {

// A figure in a table or on an axis: six significant digits.
inline std::string num(double v) { return fmt::format("{:.6g}", v); }
// An SVG coordinate: a tenth of a user unit is finer than the pages' scale shows.
inline std::string px(double v) { return fmt::format("{:.1f}", v); }

}  // namespace rcl::html_parts
