// StressProfile: typed reads of the stress intensities and their JSON form.
#include "rocm_conformance_llm/config/stress_profile.hpp"

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl {

StressProfile::StressProfile(nlohmann::json values)
    : values_(std::move(values)) {
  if (!values_.is_object()) throw ConfigError("invalid stress_profile=" + values_.dump() + ": expected a JSON object");
}

bool StressProfile::has(const std::string& mode, const std::string& key) const {
  return values_.contains(mode) && values_.at(mode).is_object() && values_.at(mode).contains(key);
}

const nlohmann::json& StressProfile::at(const std::string& mode, const std::string& key) const {
  if (!has(mode, key)) throw ConfigError("stress_profile." + mode + "." + key + " is not set");
  return values_.at(mode).at(key);
}

int64_t StressProfile::integer(const std::string& mode, const std::string& key) const {
  return at(mode, key).get<int64_t>();
}
double StressProfile::number(const std::string& mode, const std::string& key) const {
  return at(mode, key).get<double>();
}
std::string StressProfile::text(const std::string& mode, const std::string& key) const {
  return at(mode, key).get<std::string>();
}

void StressProfile::set(const std::string& mode, const std::string& key, nlohmann::json value) {
  values_[mode][key] = std::move(value);
}

void to_json(nlohmann::json& j, const StressProfile& p) { j = p.values(); }
void from_json(const nlohmann::json& j, StressProfile& p) { p = StressProfile(j); }

}  // namespace rcl
