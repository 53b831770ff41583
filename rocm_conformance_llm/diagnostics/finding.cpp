#include "rocm_conformance_llm/diagnostics/finding.hpp"

#include <cmath>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/diagnostics/registry.hpp"
#include "rocm_conformance_llm/errors.hpp"

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

nlohmann::json optional_bool(const std::optional<bool>& b) { return b ? nlohmann::json(*b) : nlohmann::json(); }

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

Action action_of(const Finding& f) {
  if (f.action) return *f.action;
  if (f.classification) {
    switch (*f.classification) {
      case Classification::transient: return Action::rerun;
      case Classification::persistent: return Action::isolate_node;
      // Both: the device computes what a higher precision or the CPU says the job computes.
      case Classification::precision:
      case Classification::configuration: return Action::check_config;
    }
  }
  if (f.severity == Severity::info) return Action::none;
  const SignatureSpec* spec = find_signature(f.signature);
  return spec ? spec->action : Action::report_upstream;
}

nlohmann::json to_json(const Finding& f) {
  return {{"component", f.component}, {"signature", f.signature},
          {"severity", to_string(f.severity)}, {"step", f.step},
          {"rank", f.rank}, {"message", f.message},
          {"evidence", f.evidence},
          {"action", to_string(action_of(f))},
          {"classification", f.classification ? nlohmann::json(to_string(*f.classification)) : nlohmann::json()},
          {"reproducible", optional_bool(f.reproducible)},
          {"also_in_fp32", optional_bool(f.also_in_fp32)},
          {"also_on_cpu", optional_bool(f.also_on_cpu)}};
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
    if (j.contains("action") && !j.at("action").is_null()) f.action = action_from_string(j.at("action").get<std::string>());
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

bool FindingLog::add(Finding f) {
  const SignatureSpec* spec = find_signature(f.signature);
  const int cap = spec ? spec->max_findings : 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (++seen_[f.signature] > cap) return false;
  }
  // Surface every finding on the console as it happens, not only in the final report.
  const auto level = f.severity == Severity::fail   ? spdlog::level::err
                     : f.severity == Severity::warn ? spdlog::level::warn
                                                    : spdlog::level::info;
  spdlog::log(level, "finding {} [{}] {} at step {} (rank {}): {}", to_string(f.severity),
              f.component, f.signature, f.step, f.rank, f.message);
  std::lock_guard<std::mutex> lock(mutex_);
  findings_.push_back(std::move(f));
  return true;
}

std::vector<Finding> FindingLog::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return findings_;
}

size_t FindingLog::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return findings_.size();
}

}  // namespace rcl
