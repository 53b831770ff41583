// report.html: one self-contained page per run (no script, font or stylesheet from anywhere but
// the page itself, so it opens offline on an air-gapped cluster): the verdict and component
// table, every finding, plots over steps drawn as inline SVG with every finding marked at its
// step, the stress modes, the config diff from the preset and the environment. Its page shell
// (html_page.hpp) and plot (svg_plot.hpp), which compare.html also draws with, come along.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/reports/html_page.hpp"
#include "rocm_conformance_llm/reports/svg_plot.hpp"

namespace rcl {

// The run's page from its report (the object ReportWriter writes to report.json) and its
// metrics file (metrics.jsonl or metrics.rank<N>.jsonl; missing or truncated lines are fine:
// a crashed run has fewer).
std::string report_html(const nlohmann::json& report, const std::filesystem::path& metrics_path);

}  // namespace rcl
