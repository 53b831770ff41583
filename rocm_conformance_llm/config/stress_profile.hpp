// The stress intensities as a JSON value ({mode: {key: value}}); the modes that declare the keys
// live in stress_modes.hpp, so presets can carry a profile without the registry.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace rcl {

// The stress intensities as data: {mode: {key: value}}, e.g. {"memory": {"min_seq_len": 8192}}.
// Each mode declares its keys, types, defaults and allowed values in the stress mode registry
// (stress_modes.hpp); a preset gives the values that fit its scale.
class StressProfile {
 public:
  StressProfile() = default;
  StressProfile(nlohmann::json values);  // NOLINT: implicit, so presets read as JSON

  bool has(const std::string& mode, const std::string& key) const;
  // ConfigError naming stress_profile.MODE.KEY when it is not set.
  const nlohmann::json& at(const std::string& mode, const std::string& key) const;
  int64_t integer(const std::string& mode, const std::string& key) const;
  double number(const std::string& mode, const std::string& key) const;
  std::string text(const std::string& mode, const std::string& key) const;
  void set(const std::string& mode, const std::string& key, nlohmann::json value);
  const nlohmann::json& values() const { return values_; }

  bool operator==(const StressProfile&) const = default;

 private:
  nlohmann::json values_ = nlohmann::json::object();
};
void to_json(nlohmann::json& j, const StressProfile& p);
void from_json(const nlohmann::json& j, StressProfile& p);

}  // namespace rcl
