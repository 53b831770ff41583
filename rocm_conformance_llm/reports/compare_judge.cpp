// What each run is judged against (the group's medians and majorities, or a baseline file, and
// the baseline file written from good runs) and the judging itself: the flags of each RunRow.
#include "rocm_conformance_llm/reports/compare.hpp"

#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/compare_parts.hpp"

namespace rcl {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kBaselineKind = "rocm-conformance-llm compare baseline";

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
  for (const auto& m : compare_parts::kMetrics) {
    std::vector<double> values;
    for (const auto& r : rows)
      if (const double v = compare_parts::metric_of(r, m.name); std::isfinite(v)) values.push_back(v);
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
      const double x = compare_parts::metric_of(r, rule.metric);
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

}  // namespace rcl
