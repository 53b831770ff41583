#include "rocm_conformance_llm/base/finding.hpp"

#include <cmath>

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl {

std::string to_string(Severity s) {
  static constexpr const char* kNames[] = {"info", "warn", "fail"};  // enum order
  return kNames[static_cast<size_t>(s)];
}

Severity severity_from_string(const std::string& s) {
  if (s == "info") return Severity::info;
  if (s == "warn") return Severity::warn;
  if (s == "fail") return Severity::fail;
  throw ConfigError("unknown severity '" + s + "' (allowed: info, warn, fail)");
}

namespace {
constexpr const char* kActionNames[] = {"rerun", "isolate_node", "report_upstream", "check_config", "none"};
constexpr const char* kClassificationNames[] = {"transient", "persistent", "precision", "configuration"};

// Index of `s` in `names`, or a ConfigError listing them.
template <size_t N>
size_t index_of(const char* const (&names)[N], const std::string& s, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return i;
  std::string allowed;
  for (const char* name : names) allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  throw ConfigError("unknown " + std::string(what) + " '" + s + "' (allowed: " + allowed + ")");
}

std::optional<bool> read_optional_bool(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<bool>();
}
}  // namespace

std::string to_string(Action a) { return kActionNames[static_cast<size_t>(a)]; }
Action action_from_string(const std::string& s) { return static_cast<Action>(index_of(kActionNames, s, "action")); }
std::string to_string(Classification c) { return kClassificationNames[static_cast<size_t>(c)]; }
Classification classification_from_string(const std::string& s) {
  return static_cast<Classification>(index_of(kClassificationNames, s, "classification"));
}

nlohmann::json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Finding finding_from_json(const nlohmann::json& j) {
  try {
    Finding f;
    f.component = j.at("component").get<std::string>();
    f.signature = j.at("signature").get<std::string>();
    f.severity = severity_from_string(j.at("severity").get<std::string>());
    f.step = j.value("step", int64_t{0});
    f.rank = j.value("rank", 0);
    f.message = j.value("message", std::string());
    f.evidence = j.value("evidence", nlohmann::json::object());
    // Reports written before these keys existed still load (compare, --baseline).
    if (j.contains("action") && !j.at("action").is_null())
      f.action = action_from_string(j.at("action").get<std::string>());
    if (j.contains("classification") && !j.at("classification").is_null())
      f.classification = classification_from_string(j.at("classification").get<std::string>());
    f.reproducible = read_optional_bool(j, "reproducible");
    f.also_in_fp32 = read_optional_bool(j, "also_in_fp32");
    f.also_on_cpu = read_optional_bool(j, "also_on_cpu");
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("malformed finding in report.json: " + std::string(e.what()));
  }
}

}  // namespace rcl
