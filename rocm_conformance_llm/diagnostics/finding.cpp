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

nlohmann::json to_json(const Finding& f) {
  return {{"component", f.component}, {"signature", f.signature},
          {"severity", to_string(f.severity)}, {"step", f.step},
          {"rank", f.rank}, {"message", f.message},
          {"evidence", f.evidence}};
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
