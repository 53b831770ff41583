// compare's three outputs from judged rows: the console table, compare.json and compare.html
// (its runs table and one plot per metric rule, drawn with svg_plot).
#include "rocm_conformance_llm/reports/compare.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/reports/compare_parts.hpp"
#include "rocm_conformance_llm/reports/html_page.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/reports/svg_plot.hpp"

namespace rcl {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string flagged_word(const RunRow& r) { return r.flags.empty() ? "ok" : "FLAGGED"; }

}  // namespace

std::string compare_table(const std::vector<RunRow>& rows) {
  size_t width = 4;
  for (const auto& r : rows) width = std::max(width, r.name.size());
  std::string t = fmt::format("{:<{}}  {:<11} {:>4} {:>4}", "run", width, "verdict", "fail", "warn");
  for (const auto& m : compare_parts::kMetrics) t += fmt::format(" {:>10}", m.column);
  t += fmt::format(" {:>8} {:>8} {:>8}  {}\n", "loss", "ops", "config", "status");
  for (const auto& r : rows) {
    t += fmt::format("{:<{}}  {:<11} {:>4} {:>4}", r.name, width, r.verdict, r.fail, r.warn);
    for (const auto& m : compare_parts::kMetrics) {
      const double v = compare_parts::metric_of(r, m.name);
      t += std::isfinite(v) ? fmt::format(" {:>10.4g}", v * m.scale) : fmt::format(" {:>10}", "-");
    }
    t += fmt::format(" {:>8} {:>8} {:>8}  {}\n", r.loss_trajectory.empty() ? "-" : r.loss_trajectory.substr(0, 8),
                     r.op_fingerprint.empty() ? "-" : r.op_fingerprint.substr(0, 8), r.config.substr(0, 8),
                     flagged_word(r));
  }
  for (const auto& r : rows)
    for (const auto& f : r.flags) t += fmt::format("FLAGGED {}: {}\n", r.name, f);
  const auto flagged = std::count_if(rows.begin(), rows.end(), [](const RunRow& r) { return !r.flags.empty(); });
  return t + fmt::format("{} run(s), {} flagged\n", rows.size(), flagged);
}

json compare_json(const std::vector<RunRow>& rows, const CompareRules& rules, const CompareReference& ref) {
  json runs = json::array();
  size_t flagged = 0;
  for (const auto& r : rows) {
    json metrics = json::object();
    for (const auto& [name, v] : r.metrics) metrics[name] = std::isfinite(v) ? json(v) : json();
    runs.push_back({{"dir", r.dir},
                    {"name", r.name},
                    {"verdict", r.verdict},
                    {"outcome", r.outcome},
                    {"exit_code", r.exit_code},
                    {"findings", {{"info", r.info}, {"warn", r.warn}, {"fail", r.fail}}},
                    {"fail_findings", r.fail_findings},
                    {"metrics", metrics},
                    {"loss_trajectory", r.loss_trajectory},
                    {"op_fingerprint", r.op_fingerprint},
                    {"config", r.config},
                    {"flagged", !r.flags.empty()},
                    {"flags", r.flags}});
    flagged += !r.flags.empty();
  }
  json reference = json::object();
  for (const auto& [name, s] : ref.metrics) reference[name] = {{"median", s.median}, {"mad", s.mad}, {"n", s.n}};
  return {{"tool", "rocm-conformance-llm compare"},
          {"reference_source", ref.source},
          {"reference", reference},
          {"rules", to_json(rules)},
          {"runs", runs},
          {"flagged", flagged},
          {"exit_code", flagged ? 1 : 0}};
}

std::string compare_html(const std::vector<RunRow>& rows, const CompareRules& rules, const CompareReference& ref) {
  const auto flagged = std::count_if(rows.begin(), rows.end(), [](const RunRow& r) { return !r.flags.empty(); });
  std::string body = fmt::format(
      "<h1>rocm-conformance-llm compare <span class=\"badge {}\">{} of {} flagged</span>"
      "</h1>\n<p>Each run is judged against the {} (rules: docs/compare.md).</p>\n",
      flagged ? "FAIL" : "PASS", flagged, rows.size(), xml_escape(ref.source));
  body += "<table id=\"runs\"><tr><th>#</th><th>run</th><th>verdict</th><th>fail</th><th>warn</th>";
  for (const auto& m : compare_parts::kMetrics) body += fmt::format("<th>{}</th>", xml_escape(m.column));
  body += "<th>loss</th><th>ops</th><th>config</th><th>flags</th></tr>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    body += fmt::format(
        "<tr id=\"run-{}\" class=\"{}\"><td>{}</td><td>{}</td><td><span class=\"badge {}\">{}</span>"
        "</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
        i + 1, r.flags.empty() ? "ok" : "flagged", i + 1, xml_escape(r.name), xml_escape(r.verdict),
        xml_escape(r.verdict), r.fail, r.warn);
    for (const auto& m : compare_parts::kMetrics) {
      const double v = compare_parts::metric_of(r, m.name);
      body += fmt::format("<td class=\"num\">{}</td>", std::isfinite(v) ? fmt::format("{:.4g}", v * m.scale) : "-");
    }
    std::string flags;
    for (const auto& f : r.flags) flags += "<div>" + xml_escape(f) + "</div>";
    body += fmt::format("<td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td></tr>\n",
                        r.loss_trajectory.substr(0, 8), r.op_fingerprint.substr(0, 8), r.config.substr(0, 8),
                        flags.empty() ? "ok" : flags);
  }
  body += "</table>\n<h2>Per run, against the reference</h2>\n";
  for (const auto& rule : rules.metrics) {
    const compare_parts::MetricDef& def =
        *std::find_if(std::begin(compare_parts::kMetrics), std::end(compare_parts::kMetrics),
                      [&](const compare_parts::MetricDef& m) { return rule.metric == m.name; });
    PlotSpec plot{rule.metric, fmt::format("{} ({} is worse)", def.column, rule.worse), "run #"};
    PlotSeries points{def.column, {}, {}, true};
    for (size_t i = 0; i < rows.size(); ++i) {
      points.x.push_back(static_cast<double>(i + 1));
      points.y.push_back(compare_parts::metric_of(rows[i], rule.metric) * def.scale);
      if (!rows[i].flags.empty())
        plot.markers.push_back({static_cast<double>(i + 1), "fail", "flagged",
                                rows[i].name + ": " + join(rows[i].flags, "; "), fmt::format("#run-{}", i + 1)});
    }
    plot.series.push_back(std::move(points));
    if (const auto s = ref.metrics.find(rule.metric); s != ref.metrics.end()) {
      plot.reference_lines.emplace_back("median", s->second.median * def.scale);
      plot.reference_lines.emplace_back(fmt::format("{}x median", rule.ratio),
                                        s->second.median * rule.ratio * def.scale);
    }
    body += svg_plot(plot);
  }
  return html_page(fmt::format("rocm-conformance-llm compare: {} of {} flagged", flagged, rows.size()), body);
}

}  // namespace rcl
