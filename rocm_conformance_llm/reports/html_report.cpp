#include "rocm_conformance_llm/reports/html_report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/reports/html_parts.hpp"
#include "rocm_conformance_llm/reports/report.hpp"

namespace rcl {

namespace {

using html_parts::num;
using stats::kNaN;
using json = nlohmann::json;

// A JSON number as a double; NaN for null (how metrics.jsonl stores NaN), strings and absence.
double number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The plots, in page order; "telemetry.<key>" plots follow, one per key a metrics row carries.
struct PlotDef {
  const char* id;
  const char* title;
};
constexpr PlotDef kPlots[] = {
    {"loss", "loss (train, validation; dashed: the corpus loss floor)"},
    {"step_time", "step time (s)"},
    {"tokens_per_s", "tokens/s (this rank)"},
    {"memory", "memory (MiB)"},
    {"grad_norm", "gradient norm (before clipping)"},
    {"loss_scale", "fp16 dynamic loss scale"},
    {"phase", "phase time (s)"},
    {"collective_bandwidth", "collective bus bandwidth (GB/s)"},
    {"collective_latency", "collective latency (ms)"},
};

// plot id -> series name -> points, as read from metrics.jsonl.
using SeriesTable = std::map<std::string, std::map<std::string, PlotSeries>>;

void add_point(SeriesTable& t, const std::string& plot, const std::string& series, double x, double y,
               bool points = false) {
  auto& s = t[plot][series];
  s.name = series;
  s.points = points;
  s.x.push_back(x);
  s.y.push_back(y);
}

void add_row(SeriesTable& t, const json& row) {
  const double step = number(row, "step");
  if (!std::isfinite(step)) return;
  add_point(t, "loss", "train", step, number(row, "loss"));
  if (row.contains("val_loss")) add_point(t, "loss", "validation", step, number(row, "val_loss"), true);
  add_point(t, "step_time", "step time", step, number(row, "step_time_s"));
  add_point(t, "tokens_per_s", "tokens/s", step, number(row, "tokens_per_s"));
  add_point(t, "grad_norm", "grad norm", step, number(row, "grad_norm"));
  add_point(t, "loss_scale", "loss scale", step, number(row, "loss_scale"));
  if (const auto m = row.find("memory"); m != row.end() && m->is_object()) {
    static constexpr std::pair<const char*, const char*> kFigures[] = {{"allocated_bytes", "allocated"},
                                                                       {"reserved_bytes", "reserved"},
                                                                       {"peak_allocated_bytes", "peak allocated"},
                                                                       {"rss_bytes", "resident set"}};
    for (const auto& [key, label] : kFigures)
      if (const double v = number(*m, key); v >= 0) add_point(t, "memory", label, step, v / (1 << 20));
  }
  if (const auto p = row.find("phase_s"); p != row.end() && p->is_object())
    for (const auto& [name, v] : p->items())
      if (v.is_number()) add_point(t, "phase", name, step, v.get<double>());
  if (const auto c = row.find("collectives"); c != row.end() && c->is_array()) {
    std::map<std::string, std::array<double, 3>> per_op;  // op -> {sum busbw, sum seconds, count}
    for (const auto& sample : *c) {
      auto& acc = per_op[sample.value("op", std::string("?"))];
      acc[0] += number(sample, "bus_bandwidth_gbps");
      acc[1] += number(sample, "seconds");
      acc[2] += 1;
    }
    for (const auto& [op, acc] : per_op) {
      add_point(t, "collective_bandwidth", op, step, acc[0] / acc[2]);
      add_point(t, "collective_latency", op, step, 1e3 * acc[1] / acc[2]);
    }
  }
  if (const auto tel = row.find("telemetry"); tel != row.end() && tel->is_object())
    for (const auto& [key, v] : tel->items())
      if (v.is_number()) add_point(t, "telemetry." + key, key, step, v.get<double>());
}

SeriesTable read_series(const std::filesystem::path& metrics_path) {
  SeriesTable t;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    // A crashed or hung run may have left half a line: what parses is plotted.
    const json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object()) add_row(t, row);
  }
  // A loss scale that never left 1 is not fp16: no plot.
  if (const auto it = t.find("loss_scale"); it != t.end()) {
    const auto& ys = it->second.begin()->second.y;
    if (std::all_of(ys.begin(), ys.end(), [](double y) { return y == 1.0; })) t.erase(it);
  }
  return t;
}

std::vector<PlotMarker> finding_markers(const json& findings) {
  std::vector<PlotMarker> markers;
  for (size_t i = 0; i < findings.size(); ++i) {
    const json& f = findings[i];
    std::string evidence = f.value("evidence", json::object()).dump();
    if (evidence.size() > 600) evidence = evidence.substr(0, 600) + "...";
    markers.push_back({static_cast<double>(f.value("step", int64_t{0})), f.value("severity", std::string("info")),
                       f.value("signature", std::string()),
                       fmt::format("[{}] {} {} at step {} (rank {}): {}\nevidence: {}", f.value("severity", ""),
                                   f.value("component", ""), f.value("signature", ""), f.value("step", int64_t{0}),
                                   f.value("rank", 0), f.value("message", ""), evidence),
                       fmt::format("#finding-{}", i)});
  }
  return markers;
}

// "a.b.c" -> value rows of a nested object, for the summary and environment tables.
void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [key, value] : j.items()) flatten(value, prefix.empty() ? key : prefix + "." + key, out);
    return;
  }
  out.emplace_back(prefix, text_of(j));
}

std::string key_value_table(const json& j) {
  std::vector<std::pair<std::string, std::string>> rows;
  flatten(j, "", rows);
  std::string t = "<table>\n";
  for (const auto& [key, value] : rows)
    t += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", xml_escape(key), xml_escape(value));
  return t + "</table>\n";
}

std::string header_section(const json& report) {
  const json& config = report.value("config", json::object());
  const std::string verdict = report.value("verdict", std::string("?"));
  std::string h = fmt::format(
      "<h1>rocm-conformance-llm <span class=\"badge {0}\" id=\"verdict\">{0}</span></h1>\n"
      "<table><tr><th>outcome</th><td id=\"outcome\">{1}</td><th>exit code</th><td>{2}</td>"
      "<th>rank</th><td>{3}</td><th>duration</th><td>{4:.1f} s</td></tr>\n",
      xml_escape(verdict), xml_escape(report.value("outcome", std::string("?"))), report.value("exit_code", -1),
      report.value("rank", 0), report.value("duration_s", 0.0));
  const json& summary = report.value("summary", json::object());
  h += fmt::format(
      "<tr><th>preset</th><td>{}</td><th>stress modes</th><td>{}</td><th>steps</th><td>{}</td>"
      "<th>device</th><td>{}</td></tr></table>\n",
      xml_escape(config.value("preset", std::string("?"))),
      xml_escape(config.contains("stress_modes") && !config["stress_modes"].empty() ? config["stress_modes"].dump()
                                                                                    : "none"),
      summary.value("steps", int64_t{0}),
      xml_escape(text_of(report.value("environment", json::object()).value("device", json("?")))));
  if (report.contains("note")) h += fmt::format("<p><b>note:</b> {}</p>\n", xml_escape(text_of(report["note"])));
  if (report.contains("coverage_note"))
    h += fmt::format("<p id=\"coverage-note\"><b>coverage:</b> {}</p>\n", xml_escape(text_of(report["coverage_note"])));
  h += "<h2>Components</h2>\n<table id=\"components\"><tr><th>component</th><th>status</th><th>info</th><th>warn</th>"
       "<th>fail</th><th>checks that ran</th><th>not exercised because</th></tr>\n";
  for (const auto& c : report.value("components", json::array())) {
    std::string checks;
    for (const auto& check : c.value("checks", json::array())) checks += (checks.empty() ? "" : ", ") + text_of(check);
    h += fmt::format(
        "<tr><td>{0}</td><td><span class=\"badge {1}\">{1}</span></td><td class=\"num\">{2}</td>"
        "<td class=\"num\">{3}</td><td class=\"num\">{4}</td><td>{5}</td><td>{6}</td></tr>\n",
        xml_escape(c.value("component", "")), xml_escape(c.value("status", "")), c.value("info", 0), c.value("warn", 0),
        c.value("fail", 0), xml_escape(checks), xml_escape(c.value("exercised", true) ? "" : c.value("reason", "")));
  }
  return h + "</table>\n";
}

std::string findings_section(const json& findings) {
  std::string s = fmt::format("<h2>Findings ({})</h2>\n", findings.size());
  if (findings.empty()) return s + "<p>none</p>\n";
  s += "<table id=\"findings\"><tr><th>#</th><th>severity</th><th>component</th><th>signature</th><th>step</th>"
       "<th>rank</th><th>message</th><th>action</th><th>evidence</th></tr>\n";
  for (size_t i = 0; i < findings.size(); ++i) {
    const json& f = findings[i];
    // Reports older than the action key show none; the classification is null where not re-run.
    std::string action = f.contains("action") ? f.at("action").get<std::string>() : "";
    if (f.contains("classification") && f.at("classification").is_string())
      action += " (" + f.at("classification").get<std::string>() + ")";
    s += fmt::format(
        "<tr id=\"finding-{0}\" class=\"sev-{1}\"><td>{0}</td><td>{1}</td><td>{2}</td><td>{3}</td>"
        "<td class=\"num\">{4}</td><td class=\"num\">{5}</td><td>{6}</td><td>{7}</td><td><pre>{8}</pre></td></tr>\n",
        i, xml_escape(f.value("severity", "")), xml_escape(f.value("component", "")),
        xml_escape(f.value("signature", "")), f.value("step", int64_t{0}), f.value("rank", 0),
        xml_escape(f.value("message", "")), xml_escape(action),
        xml_escape(f.value("evidence", json::object()).dump(1)));
  }
  return s + "</table>\n";
}

// The collective battery's table (checks/detectors/collective_check.hpp): kind x size x dtype.
std::string collectives_section(const json& collectives) {
  const json cases = collectives.value("cases", json::array());
  if (cases.empty()) return "";
  std::string s = fmt::format(
      "<h2>Collectives ({} ranks, {} batteries)</h2>\n<table id=\"collectives\"><tr><th>kind</th>"
      "<th>op</th><th>dtype</th><th>bytes</th><th>verified</th><th>bus bandwidth (GB/s)</th>"
      "<th>latency (ms)</th><th>runs</th><th>route</th></tr>\n",
      collectives.value("world_size", 0), collectives.value("batteries", 0));
  for (const json& c : cases) {
    const bool verified = c.value("verified", false);
    s += fmt::format(
        "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
        verified ? "" : "flagged", xml_escape(c.value("kind", "")), xml_escape(c.value("reduce_op", "")),
        xml_escape(c.value("dtype", "")), c.value("bytes", int64_t{0}),
        verified ? "yes" : fmt::format("no ({} wrong)", c.value("wrong_runs", 0)), num(number(c, "bus_bandwidth_gbps")),
        num(1e3 * number(c, "latency_s")), c.value("runs", 0), xml_escape(c.value("route", "")));
  }
  return s + "</table>\n";
}

// The training's own collectives (reports/training_collectives.hpp): group x kind x dtype x size.
// No row is flagged: a message's bus bandwidth depends on its size (small ones are latency-bound),
// so comparing rows would be a false alarm; the battery's slow finding judges the link.
std::string training_collectives_section(const json& collectives) {
  const json rows = collectives.value("training", json::array());
  if (rows.empty()) return "";
  std::string s =
      "<h2>Training collectives</h2>\n<table id=\"training-collectives\"><tr><th>group</th><th>kind</th>"
      "<th>op</th><th>dtype</th><th>bytes</th><th>bus bandwidth (GB/s, median)</th><th>latency (ms, "
      "median)</th><th>latency (ms, p95)</th><th>calls</th><th>total bytes</th><th>issued as</th></tr>\n";
  for (const json& r : rows) {
    std::string ops;
    for (const json& op : r.value("ops", json::array())) ops += (ops.empty() ? "" : ", ") + op.get<std::string>();
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td>{}</td></tr>\n",
        xml_escape(r.value("group", "")), xml_escape(r.value("kind", "")), xml_escape(r.value("reduce_op", "")),
        xml_escape(r.value("dtype", "")), r.value("bytes", int64_t{0}), num(number(r, "bus_bandwidth_gbps")),
        num(1e3 * number(r, "latency_median_s")), num(1e3 * number(r, "latency_p95_s")), r.value("calls", int64_t{0}),
        r.value("total_bytes", int64_t{0}), xml_escape(ops));
  }
  return s + "</table>\n";
}

std::string plots_section(const json& report, const std::filesystem::path& metrics_path) {
  SeriesTable table = read_series(metrics_path);
  const auto markers = finding_markers(report.value("findings", json::array()));
  std::optional<double> floor;
  if (const auto it = report.find("loss_floor"); it != report.end() && it->is_number()) floor = it->get<double>();

  std::vector<std::pair<std::string, std::string>> order;  // (id, title)
  for (const auto& p : kPlots) order.emplace_back(p.id, p.title);
  for (const auto& [id, series] : table)
    if (id.rfind("telemetry.", 0) == 0) order.emplace_back(id, id);

  std::string s = fmt::format(
      "<h2>Over the steps</h2>\n<p>Dashed verticals are findings at their step (hover: the "
      "message and evidence; click: its row in the table). Source: {}.</p>\n",
      xml_escape(metrics_path.filename().string()));
  bool any = false;
  for (const auto& [id, title] : order) {
    const auto it = table.find(id);
    if (it == table.end()) continue;
    PlotSpec plot{id, title};
    for (auto& [name, series] : it->second) plot.series.push_back(std::move(series));
    if (id == "loss" && floor) plot.reference_lines.emplace_back("corpus loss floor", *floor);
    plot.markers = markers;
    s += svg_plot(plot);
    any = true;
  }
  if (!any) s += "<p>No step finished: nothing to plot.</p>\n";
  return s;
}

// Where the run's training config differs from its preset's (--set, --config) and where the
// stress modes then changed it; diagnostics that differ from the defaults.
std::string config_section(const json& config) {
  std::string s = "<h2>Stress modes</h2>\n";
  const json& changes = config.value("stress_changes", json::object());
  const json& skipped = config.value("stress_skipped", json::object());
  if (config.value("stress_modes", json::array()).empty()) s += "<p>none</p>\n";
  s += "<table id=\"stress\"><tr><th>mode</th><th>field</th><th>from</th><th>to</th></tr>\n";
  for (const auto& mode : config.value("stress_modes", json::array())) {
    const std::string name = text_of(mode);
    if (skipped.contains(name)) {
      s += fmt::format("<tr><td>{}</td><td colspan=\"3\">skipped: {}</td></tr>\n", xml_escape(name),
                       xml_escape(text_of(skipped[name])));
      continue;
    }
    const json fields = changes.value(name, json::object());
    for (const auto& [field, change] : fields.items())
      s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", xml_escape(name), xml_escape(field),
                       xml_escape(change.at(0).dump()), xml_escape(change.at(1).dump()));
  }
  s += "</table>\n";

  json preset_training;
  try {
    preset_training = find_preset(config.value("preset", std::string())).training;
  } catch (const std::exception&) {
    // A report from a build with other presets: no preset column to compare with.
  }
  s += "<h2>Configuration: differences from the preset</h2>\n<table id=\"config-diff\"><tr><th>key</th><th>preset"
       "</th><th>this run (--set, --config)</th><th>after stress modes</th></tr>\n";
  const json base = config.value("base_training", json::object());
  const json training = config.value("training", json::object());
  for (const auto& [key, value] : training.items()) {
    const json preset_value = preset_training.is_object() ? preset_training.value(key, json()) : json();
    const json base_value = base.value(key, json());
    if (preset_value == base_value && base_value == value) continue;
    s += fmt::format("<tr><td>training.{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", xml_escape(key),
                     xml_escape(preset_value.dump()), xml_escape(base_value.dump()), xml_escape(value.dump()));
  }
  const json defaults = DiagnosticsConfig{};
  const json diagnostics = config.value("diagnostics", json::object());
  for (const auto& [key, value] : diagnostics.items())
    if (defaults.value(key, json()) != value)
      s += fmt::format("<tr><td>diagnostics.{}</td><td>{}</td><td>{}</td><td></td></tr>\n", xml_escape(key),
                       xml_escape(defaults.value(key, json()).dump()), xml_escape(value.dump()));
  for (const char* key : {"inject", "baseline"})
    if (!config.value(key, std::string()).empty())
      s += fmt::format("<tr><td>--{}</td><td></td><td>{}</td><td></td></tr>\n", key,
                       xml_escape(config.value(key, std::string())));
  return s + "</table>\n";
}

}  // namespace

std::string report_html(const json& report, const std::filesystem::path& metrics_path) {
  std::string body = header_section(report);
  body += findings_section(report.value("findings", json::array()));
  body += plots_section(report, metrics_path);
  body += "<h2>Summary</h2>\n" + key_value_table(report.value("summary", json::object()));
  body += collectives_section(report.value("collectives", json::object()));
  body += training_collectives_section(report.value("collectives", json::object()));
  for (const char* section : {"interruption", "baseline", "faults"})
    if (report.contains(section) && !report[section].empty())
      body += fmt::format("<h2>{}</h2>\n<pre>{}</pre>\n", section, xml_escape(report[section].dump(2)));
  body += config_section(report.value("config", json::object()));
  body += "<h2>Environment</h2>\n" + key_value_table(report.value("environment", json::object()));
  return html_page(fmt::format("rocm-conformance-llm {} ({})", report.value("verdict", std::string("?")),
                               report.value("config", json::object()).value("output_dir", std::string())),
                   body);
}

}  // namespace rcl
