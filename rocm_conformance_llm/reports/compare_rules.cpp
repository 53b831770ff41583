// compare's rules: the defaults, a rules file overlaying them (validated key by key) and their
// JSON form; apart from reading runs and judging them, which only take the result.
#include "rocm_conformance_llm/reports/compare.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/compare_parts.hpp"

namespace rcl {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using stats::kNaN;

bool known_metric(const std::string& name) {
  return std::any_of(std::begin(compare_parts::kMetrics), std::end(compare_parts::kMetrics),
                     [&](const compare_parts::MetricDef& m) { return name == m.name; });
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
  const json doc = compare_parts::read_json(file);
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

}  // namespace rcl
