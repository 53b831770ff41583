#include "rocm_conformance_llm/reports/compare.hpp"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/baseline.hpp"
#include "rocm_conformance_llm/reports/html_report.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using stats::kNaN;
constexpr const char* kBaselineKind = "rocm-conformance-llm compare baseline";

// The figures compare reads from a run's report.json summary (outputs.md), and their columns.
struct MetricDef {
  const char* name;
  const char* pointer;  // into report.json's "summary"
  const char* column;
  double scale;  // for the console table
};
constexpr MetricDef kMetrics[] = {
    {"tokens_per_s", "/tokens_per_s/overall", "tok/s", 1},
    {"step_time_p50_s", "/step_time_s/median", "p50 ms", 1e3},
    {"step_time_p95_s", "/step_time_s/p95", "p95 ms", 1e3},
    {"peak_memory_bytes", "/peak_memory/bytes", "peak MiB", 1.0 / (1 << 20)},
    {"final_loss", "/loss/last", "final loss", 1},
};

bool known_metric(const std::string& name) {
  return std::any_of(std::begin(kMetrics), std::end(kMetrics), [&](const MetricDef& m) { return name == m.name; });
}

// FNV-1a, 64 bits, as 16 hex digits: equal inputs, equal text, on every machine.
class Fnv {
 public:
  void add(const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ULL;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  template <typename T>
  void add_value(T v) {
    add(&v, sizeof v);
  }
  std::string hex() const { return fmt::format("{:016x}", h_); }

 private:
  uint64_t h_ = 1469598103934665603ULL;
};

double json_double(const json& v) { return v.is_number() ? v.get<double>() : kNaN; }

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("compare: cannot read '" + path.string() + "'");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw ConfigError("compare: '" + path.string() + "' is not valid JSON (" + e.what() + ")");
  }
}

// Quoted globs ("runs/node*") are expanded here; anything else is taken as written.
std::vector<std::string> expand(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& arg : args) {
    if (arg.find_first_of("*?[") == std::string::npos) {
      out.push_back(arg);
      continue;
    }
    glob_t g{};
    if (::glob(arg.c_str(), GLOB_ONLYDIR, nullptr, &g) != 0) {
      ::globfree(&g);
      throw ConfigError("compare: '" + arg + "' matches no directory");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return out;
}

std::string flagged_word(const RunRow& r) { return r.flags.empty() ? "ok" : "FLAGGED"; }

double metric_of(const RunRow& r, const std::string& name) {
  const auto it = r.metrics.find(name);
  return it == r.metrics.end() ? kNaN : it->second;
}

}  // namespace

CompareRules default_compare_rules() {
  CompareRules r;
  r.metrics = {{"tokens_per_s", "lower", 0.9, 3.5},
               {"step_time_p50_s", "higher", 1.15, 3.5},
               {"step_time_p95_s", "higher", 1.5, 3.5},
               {"peak_memory_bytes", "higher", 1.15, 3.5},
               {"final_loss", "higher", 1.1, 3.5}};
  return r;
}

json to_json(const CompareRules& r) {
  json metrics = json::array();
  for (const auto& m : r.metrics)
    metrics.push_back({{"metric", m.metric}, {"worse", m.worse}, {"ratio", m.ratio}, {"robust_z", m.robust_z}});
  return {{"metrics", metrics},
          {"fail_finding", r.fail_finding},
          {"warn_finding", r.warn_finding},
          {"not_completed", r.not_completed},
          {"loss_bitwise_majority", r.loss_bitwise_majority},
          {"op_fingerprint_majority", r.op_fingerprint_majority}};
}

CompareRules load_compare_rules(const fs::path& file) {
  const json doc = read_json(file);
  const std::string where = "compare rules '" + file.string() + "'";
  if (!doc.is_object()) throw ConfigError(where + ": expected a JSON object");
  CompareRules rules = default_compare_rules();
  const std::pair<const char*, bool CompareRules::*> kSwitches[] = {
      {"fail_finding", &CompareRules::fail_finding},
      {"warn_finding", &CompareRules::warn_finding},
      {"not_completed", &CompareRules::not_completed},
      {"loss_bitwise_majority", &CompareRules::loss_bitwise_majority},
      {"op_fingerprint_majority", &CompareRules::op_fingerprint_majority}};
  for (const auto& [key, value] : doc.items()) {
    if (key == "metrics") {
      if (!value.is_array()) throw ConfigError(where + ": 'metrics' must be a list");
      for (const auto& m : value) {
        MetricRule rule{m.value("metric", std::string()), m.value("worse", std::string()), m.value("ratio", kNaN),
                        m.value("robust_z", 3.5)};
        if (!known_metric(rule.metric))
          throw ConfigError(
              fmt::format("{}: unknown metric '{}' (known: tokens_per_s, step_time_p50_s, "
                          "step_time_p95_s, peak_memory_bytes, final_loss)",
                          where, rule.metric));
        if (rule.worse != "lower" && rule.worse != "higher")
          throw ConfigError(fmt::format("{}: metric '{}': worse must be 'lower' or 'higher'", where, rule.metric));
        if (!(rule.ratio > 0) || !(rule.robust_z >= 0))
          throw ConfigError(fmt::format("{}: metric '{}': ratio must be > 0 and robust_z >= 0", where, rule.metric));
        std::erase_if(rules.metrics, [&](const MetricRule& r) { return r.metric == rule.metric; });
        rules.metrics.push_back(rule);
      }
      continue;
    }
    const auto sw =
        std::find_if(std::begin(kSwitches), std::end(kSwitches), [&](const auto& s) { return key == s.first; });
    if (sw == std::end(kSwitches))
      throw ConfigError(
          fmt::format("{}: unknown key '{}' (known: metrics, fail_finding, warn_finding, "
                      "not_completed, loss_bitwise_majority, op_fingerprint_majority)",
                      where, key));
    if (!value.is_boolean()) throw ConfigError(fmt::format("{}: '{}' must be true or false", where, key));
    rules.*(sw->second) = value.get<bool>();
  }
  return rules;
}

RunRow load_run_row(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw ConfigError("compare: '" + dir.string() + "' is not a directory");
  const bool has_report = fs::exists(dir / "report.json");
  if (!has_report && !fs::exists(dir / "config.json"))
    throw ConfigError("compare: '" + dir.string() + "' is not a run directory (no report.json or config.json)");
  RunRow row;
  row.dir = dir.string();
  row.name = dir.lexically_normal().string();
  if (!row.name.empty() && row.name.back() == '/') row.name.pop_back();
  for (const auto& m : kMetrics) row.metrics[m.name] = kNaN;

  json config;
  if (has_report) {
    const json report = read_json(dir / "report.json");
    row.verdict = report.value("verdict", std::string("?"));
    row.outcome = report.value("outcome", std::string("?"));
    row.exit_code = report.value("exit_code", -1);
    for (const auto& f : report.value("findings", json::array())) {
      const std::string severity = f.value("severity", std::string());
      ++(severity == "fail" ? row.fail : severity == "warn" ? row.warn : row.info);
      if (severity == "fail")
        row.fail_findings.push_back(
            fmt::format("{} {}@{}", f.value("component", ""), f.value("signature", ""), f.value("step", int64_t{0})));
    }
    const json& summary = report.value("summary", json::object());
    for (const auto& m : kMetrics)
      if (const json::json_pointer ptr(m.pointer); summary.contains(ptr))
        row.metrics[m.name] = json_double(summary.at(ptr));
    if (row.metrics["peak_memory_bytes"] < 0) row.metrics["peak_memory_bytes"] = kNaN;
    config = report.value("config", json::object());
  } else {
    config = read_json(dir / "config.json");
  }
  Fnv config_hash;
  config_hash.add(config.value("training", json::object()).dump());
  row.config = config_hash.hex();

  if (fs::exists(dir / "metrics.jsonl")) {
    const RunRecord record = load_run_record(dir);
    Fnv loss, ops;
    bool any_ops = false;
    for (const auto& p : record.steps) {
      loss.add_value(p.step);
      loss.add_value(p.loss);  // the bits: NaN payloads and -0 count
      if (p.op_counts.empty()) continue;
      any_ops = true;
      ops.add_value(p.step);
      for (const auto& [op, n] : p.op_counts) {
        ops.add(op);
        ops.add_value(n);
      }
    }
    if (!record.steps.empty()) row.loss_trajectory = loss.hex();
    if (any_ops) row.op_fingerprint = ops.hex();
  }
  return row;
}

namespace {
// Per config, the hash more than half of that config's runs share (and at least two).
std::map<std::string, std::string> majority(const std::vector<RunRow>& rows, std::string RunRow::*field) {
  std::map<std::string, std::map<std::string, int>> counts;
  std::map<std::string, int> runs;
  for (const auto& r : rows) {
    if ((r.*field).empty()) continue;
    ++counts[r.config][r.*field];
    ++runs[r.config];
  }
  std::map<std::string, std::string> out;
  for (const auto& [config, by_hash] : counts)
    for (const auto& [hash, n] : by_hash)
      if (n >= 2 && 2 * n > runs[config]) out[config] = hash;
  return out;
}
}  // namespace

CompareReference group_reference(const std::vector<RunRow>& rows) {
  CompareReference ref;
  ref.source = "group";
  for (const auto& m : kMetrics) {
    std::vector<double> values;
    for (const auto& r : rows)
      if (const double v = metric_of(r, m.name); std::isfinite(v)) values.push_back(v);
    if (values.empty()) continue;
    const double median = stats::median(values);
    std::vector<double> deviations;
    for (double v : values) deviations.push_back(std::abs(v - median));
    ref.metrics[m.name] = {median, stats::median(deviations), values.size()};
  }
  ref.loss_trajectory = majority(rows, &RunRow::loss_trajectory);
  ref.op_fingerprint = majority(rows, &RunRow::op_fingerprint);
  return ref;
}

json baseline_json(const CompareReference& ref, const CompareRules& rules, const std::vector<RunRow>& rows) {
  json metrics = json::object();
  for (const auto& [name, s] : ref.metrics) {
    metrics[name] = {{"median", s.median}, {"mad", s.mad}, {"n", s.n}};
    for (const auto& rule : rules.metrics)
      if (rule.metric == name)
        metrics[name]["expected"] =
            rule.worse == "lower" ? json{{"min", s.median * rule.ratio}} : json{{"max", s.median * rule.ratio}};
  }
  json runs = json::array();
  for (const auto& r : rows) runs.push_back(r.name);
  return {{"kind", kBaselineKind},
          {"version", 1},
          {"runs", runs},
          {"metrics", metrics},
          {"loss_trajectory", ref.loss_trajectory},
          {"op_fingerprint", ref.op_fingerprint},
          {"rules", to_json(rules)}};
}

CompareReference reference_from_baseline(const json& b, const std::string& source) {
  if (!b.is_object() || b.value("kind", std::string()) != kBaselineKind)
    throw ConfigError("compare --baseline '" + source + "': not a baseline written by compare --baseline-out");
  CompareReference ref;
  ref.source = "baseline " + source;
  try {
    for (const auto& [name, s] : b.at("metrics").items())
      ref.metrics[name] = {s.at("median").get<double>(), s.at("mad").get<double>(), s.at("n").get<size_t>()};
    ref.loss_trajectory = b.at("loss_trajectory").get<std::map<std::string, std::string>>();
    ref.op_fingerprint = b.at("op_fingerprint").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    throw ConfigError("compare --baseline '" + source + "': malformed (" + e.what() + ")");
  }
  return ref;
}

void judge_runs(std::vector<RunRow>& rows, const CompareRules& rules, const CompareReference& ref) {
  const std::string against = ref.source == "group" ? "group" : "baseline";
  for (auto& r : rows) {
    r.flags.clear();
    if (rules.not_completed && r.outcome != "completed")
      r.flags.push_back(r.verdict == "NO REPORT" ? "no report.json: the run was killed or is still going"
                                                 : fmt::format("did not complete: {} ({})", r.verdict, r.outcome));
    if (rules.fail_finding && r.fail > 0) {
      std::string list;
      for (size_t i = 0; i < r.fail_findings.size() && i < 3; ++i) list += (i ? ", " : "") + r.fail_findings[i];
      r.flags.push_back(fmt::format("{} fail finding(s): {}{}", r.fail, list, r.fail > 3 ? ", ..." : ""));
    }
    if (rules.warn_finding && r.warn > 0) r.flags.push_back(fmt::format("{} warning(s)", r.warn));
    for (const auto& rule : rules.metrics) {
      const double x = metric_of(r, rule.metric);
      const auto stat = ref.metrics.find(rule.metric);
      if (!std::isfinite(x) || stat == ref.metrics.end() || stat->second.median == 0) continue;
      const auto& s = stat->second;
      const double limit = s.median * rule.ratio;
      const bool beyond = rule.worse == "lower" ? x < limit : x > limit;
      const double scale = 1.4826 * s.mad;  // the MAD of a normal sample estimates 0.6745 sigma
      const double z =
          scale > 0 ? (x - s.median) / scale : (x == s.median ? 0.0 : std::copysign(INFINITY, x - s.median));
      if (beyond && std::abs(z) > rule.robust_z)
        r.flags.push_back(fmt::format("{} {:.4g} is {:.2f}x the {} median {:.4g} (limit {}x, robust z {:.1f})",
                                      rule.metric, x, x / s.median, against, s.median, rule.ratio, z));
    }
    const auto check_majority = [&](bool on, const std::string& value,
                                    const std::map<std::string, std::string>& ref_map, const char* what) {
      if (!on || value.empty()) return;
      if (const auto it = ref_map.find(r.config); it != ref_map.end() && it->second != value)
        r.flags.push_back(fmt::format("{} {} differs from the {} majority {} of the same config", what,
                                      value.substr(0, 8), against, it->second.substr(0, 8)));
    };
    check_majority(rules.loss_bitwise_majority, r.loss_trajectory, ref.loss_trajectory, "loss trajectory (bitwise)");
    check_majority(rules.op_fingerprint_majority, r.op_fingerprint, ref.op_fingerprint, "op fingerprint");
  }
}

std::string compare_table(const std::vector<RunRow>& rows) {
  size_t width = 4;
  for (const auto& r : rows) width = std::max(width, r.name.size());
  std::string t = fmt::format("{:<{}}  {:<11} {:>4} {:>4}", "run", width, "verdict", "fail", "warn");
  for (const auto& m : kMetrics) t += fmt::format(" {:>10}", m.column);
  t += fmt::format(" {:>8} {:>8} {:>8}  {}\n", "loss", "ops", "config", "status");
  for (const auto& r : rows) {
    t += fmt::format("{:<{}}  {:<11} {:>4} {:>4}", r.name, width, r.verdict, r.fail, r.warn);
    for (const auto& m : kMetrics) {
      const double v = metric_of(r, m.name);
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
  for (const auto& m : kMetrics) body += fmt::format("<th>{}</th>", xml_escape(m.column));
  body += "<th>loss</th><th>ops</th><th>config</th><th>flags</th></tr>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    body += fmt::format(
        "<tr id=\"run-{}\" class=\"{}\"><td>{}</td><td>{}</td><td><span class=\"badge {}\">{}</span>"
        "</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
        i + 1, r.flags.empty() ? "ok" : "flagged", i + 1, xml_escape(r.name), xml_escape(r.verdict),
        xml_escape(r.verdict), r.fail, r.warn);
    for (const auto& m : kMetrics) {
      const double v = metric_of(r, m.name);
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
    const MetricDef& def = *std::find_if(std::begin(kMetrics), std::end(kMetrics),
                                         [&](const MetricDef& m) { return rule.metric == m.name; });
    PlotSpec plot{rule.metric, fmt::format("{} ({} is worse)", def.column, rule.worse), "run #"};
    PlotSeries points{def.column, {}, {}, true};
    for (size_t i = 0; i < rows.size(); ++i) {
      points.x.push_back(static_cast<double>(i + 1));
      points.y.push_back(metric_of(rows[i], rule.metric) * def.scale);
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

int run_compare(const CompareOptions& o) {
  const auto dirs = expand(o.run_dirs);
  if (dirs.empty()) throw ConfigError("compare: no run directory given (rocm-conformance-llm compare RUN_DIR...)");
  if (!o.baseline_in.empty() && !o.baseline_out.empty())
    throw ConfigError("compare: --baseline and --baseline-out together: judge against a baseline, or write one");
  const CompareRules rules = o.rules_file.empty() ? default_compare_rules() : load_compare_rules(o.rules_file);
  std::vector<RunRow> rows;
  for (const auto& d : dirs) rows.push_back(load_run_row(d));
  const CompareReference ref =
      o.baseline_in.empty() ? group_reference(rows) : reference_from_baseline(read_json(o.baseline_in), o.baseline_in);
  judge_runs(rows, rules, ref);

  std::cout << compare_table(rows);
  const fs::path out(o.output_dir);
  write_file_atomically(out / "compare.json", compare_json(rows, rules, ref).dump(2) + "\n");
  write_file_atomically(out / "compare.html", compare_html(rows, rules, ref));
  std::cout << "wrote " << (out / "compare.json").string() << " and " << (out / "compare.html").string() << "\n";

  const bool any_flagged = std::any_of(rows.begin(), rows.end(), [](const RunRow& r) { return !r.flags.empty(); });
  if (!o.baseline_out.empty()) {
    if (any_flagged) {
      std::cerr << "error: not writing the baseline " << o.baseline_out << ": a baseline comes from good runs only\n";
      return kExitFailFinding;
    }
    write_file_atomically(o.baseline_out, baseline_json(ref, rules, rows).dump(2) + "\n");
    std::cout << "wrote baseline " << o.baseline_out << " from " << rows.size() << " run(s)\n";
  }
  return any_flagged ? kExitFailFinding : kExitClean;
}

}  // namespace rcl
