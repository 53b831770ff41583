// The stress mode registry and what is done with the registered modes: the profile checked
// against their intensities, `--stress` parsed, modes composed and explained, `--list-stress`.
#include "rocm_conformance_llm/stress_modes.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/config/builtin_stress_modes.hpp"

namespace rcl {
namespace {

Registry<StressMode>& stress_mode_table() {
  static Registry<StressMode> modes(builtin_stress_modes());
  return modes;
}

const StressMode& find_mode(const std::string& name) {
  for (const auto& mode : stress_mode_registry())
    if (mode.name == name) return mode;
  throw ConfigError("unknown stress mode '" + name + "'");
}

// The mode's {key: value}: the profile's, else the declared default.
nlohmann::json intensities_of(const StressMode& mode, const StressProfile& profile) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& f : mode.intensities)
    out[f.name] = profile.has(mode.name, f.name) ? profile.at(mode.name, f.name) : f.default_value;
  return out;
}

void apply_mode(const StressMode& mode, const StressProfile& profile, const Capabilities& caps,
                nlohmann::json& config) {
  const nlohmann::json intensities = intensities_of(mode, profile);
  for (const auto& rule : mode.rules)
    if (rule.when.unmet(caps).empty()) apply_stress_rule(rule, intensities, config);
}

}  // namespace

std::vector<std::string> StressMode::writes() const {
  std::vector<std::string> fields;
  for (const auto& rule : rules) fields.push_back(rule.field);
  for (const auto& rule : rules)
    for (const auto& scale : rule.inverse_scales) fields.push_back(scale.field);
  return fields;
}

std::vector<std::string> StressMode::reads() const {
  std::vector<std::string> fields;
  for (const auto& rule : rules)
    for (const auto* read : {&rule.multiple_of, &rule.width, &rule.aligned_to})
      if (!read->empty()) fields.push_back(*read);
  return fields;
}

const std::vector<StressMode>& stress_mode_registry() { return stress_mode_table().entries(); }

std::vector<std::string> stress_mode_names() {
  std::vector<std::string> names;
  for (const auto& mode : stress_mode_registry()) names.push_back(mode.name);
  return names;
}

StressModeRegistration register_stress_mode(StressMode mode) {
  const auto names = stress_mode_names();
  if (mode.name.empty() || mode.name == "all" || std::find(names.begin(), names.end(), mode.name) != names.end())
    throw ConfigError("cannot register stress mode '" + mode.name + "': the name is empty, 'all' or taken");
  return StressModeRegistration(stress_mode_table(), std::move(mode));
}

StressProfile complete_stress_profile(const StressProfile& profile) {
  StressProfile out = profile;
  for (const auto& mode : stress_mode_registry()) {
    for (const auto& f : mode.intensities) {
      nlohmann::json value = profile.has(mode.name, f.name) ? profile.at(mode.name, f.name) : f.default_value;
      if (f.default_value.is_number_float() && value.is_number()) value = value.get<double>();
      out.set(mode.name, f.name, std::move(value));
    }
  }
  return out;
}

void validate(const StressProfile& profile) {
  for (const auto& [mode_name, values] : profile.values().items()) {
    const auto names = stress_mode_names();
    if (std::find(names.begin(), names.end(), mode_name) == names.end())
      throw ConfigError("unknown config key 'stress_profile." + mode_name + "': known keys are " + join(names));
    const StressMode& mode = find_mode(mode_name);
    const std::string where = "stress_profile." + mode_name;
    if (!values.is_object()) throw ConfigError(where + ": expected a JSON object, got " + values.dump());
    for (const auto& item : values.items()) {
      // Not a structured binding: clang < 16 cannot capture one (scripts/fuzz.sh builds this with clang).
      const std::string& key = item.key();
      const auto& value = item.value();
      const auto field = std::find_if(mode.intensities.begin(), mode.intensities.end(),
                                      [&](const ConfigField& f) { return f.name == key; });
      if (field == mode.intensities.end()) {
        std::vector<std::string> known;
        for (const auto& f : mode.intensities) known.push_back(f.name);
        throw ConfigError("unknown config key '" + where + "." + key + "': known keys are " + join(known));
      }
      validate_field(value, *field, where + "." + key);
    }
  }
}

std::vector<std::string> parse_stress_list(const std::string& text) {
  const auto known = stress_mode_names();
  std::string known_text = "all";
  for (const auto& name : known) known_text += ", " + name;

  std::vector<std::string> wanted;
  std::stringstream items(text);
  std::string item;
  bool saw_item = false;
  while (std::getline(items, item, ',')) {
    saw_item = true;
    const std::string name = trim(item);
    if (name.empty()) throw ConfigError("invalid --stress '" + text + "': empty mode name; known modes: " + known_text);
    if (name == "all") {
      wanted.insert(wanted.end(), known.begin(), known.end());
    } else if (std::find(known.begin(), known.end(), name) != known.end()) {
      wanted.push_back(name);
    } else {
      throw ConfigError("invalid --stress '" + text + "': unknown mode '" + name + "'; known modes: " + known_text);
    }
  }
  if (!saw_item || trim(text).empty())
    throw ConfigError("invalid --stress '" + text + "': empty list; known modes: " + known_text);
  if (text.back() == ',')
    throw ConfigError("invalid --stress '" + text + "': empty mode name; known modes: " + known_text);

  std::vector<std::string> canonical;
  for (const auto& name : known)
    if (std::find(wanted.begin(), wanted.end(), name) != wanted.end()) canonical.push_back(name);
  return canonical;
}

TrainingConfig with_attention_resolved(TrainingConfig base, const std::vector<std::string>& modes,
                                       const StressProfile& profile, const Capabilities& caps) {
  if (base.attention_backend != AttentionBackend::automatic) return base;
  // No rule on mixed_precision or dropout reads the backend, so the modes composed on the explicit
  // path tell the precision and dropout they leave whichever backend `auto` becomes.
  TrainingConfig explicit_path = base;
  explicit_path.attention_backend = AttentionBackend::math;
  const TrainingConfig left = compose_stress_modes(explicit_path, modes, profile, caps).training;
  base.attention_backend =
      resolve_attention_backend(AttentionBackend::automatic, caps, left.mixed_precision, left.dropout > 0);
  return base;
}

StressComposition compose_stress_modes(const TrainingConfig& base, const std::vector<std::string>& modes,
                                       const StressProfile& profile, const Capabilities& caps) {
  StressComposition out;
  // The rules see the backend the run will use.
  require_resolved(base.attention_backend, "the stress rules");
  nlohmann::json config = base;
  for (const auto& name : modes) {
    const StressMode& mode = find_mode(name);
    const std::string reason = mode.requires_capability.unmet(caps);
    if (reason.empty()) apply_mode(mode, profile, caps, config);
    else out.skipped[name] = reason;
  }
  out.training = config.get<TrainingConfig>();
  return out;
}

nlohmann::json config_diff(const TrainingConfig& before, const TrainingConfig& after) {
  const nlohmann::json a = before, b = after;
  nlohmann::json diff = nlohmann::json::object();
  for (const auto& [field, value] : a.items())
    if (b.at(field) != value) diff[field] = {value, b.at(field)};
  return diff;
}

nlohmann::json explain_stress(const TrainingConfig& base, const std::vector<std::string>& modes,
                              const StressProfile& profile, const Capabilities& caps) {
  nlohmann::json out = nlohmann::json::object();
  // What the modes change, not what resolving `auto` does: from the base no mode has touched.
  const TrainingConfig resolved = compose_stress_modes(base, {}, profile, caps).training;
  for (const auto& name : modes) {
    const auto composed = compose_stress_modes(base, {name}, profile, caps);
    if (composed.skipped.empty()) out[name] = config_diff(resolved, composed.training);
  }
  return out;
}

std::string describe_stress_modes(bool markdown) {
  std::string out = markdown ? "| mode | targets | rules | reads | capability |\n|---|---|---|---|---|\n" : "";
  for (const auto& mode : stress_mode_registry()) {
    std::vector<std::string> rules, reads;
    for (const auto& rule : mode.rules) rules.push_back(describe_rule(rule, markdown));
    for (const auto& field : mode.reads()) reads.push_back(markdown ? "`" + field + "`" : field);
    const std::string capability = mode.requires_capability.describe();
    if (markdown) {
      out += fmt::format("| `{}` | {} | {} | {} | {} |\n", mode.name, mode.targets, join(rules, "<br>"),
                         reads.empty() ? "none" : join(reads), capability.empty() ? "none" : capability);
      continue;
    }
    out += fmt::format("{:<7} targets {}\n        {}\n        rules: {}\n", mode.name, mode.targets, mode.summary,
                       join(rules, "; "));
    if (!reads.empty()) out += fmt::format("        reads: {}\n", join(reads));
    if (!capability.empty()) out += fmt::format("        requires: {}\n", capability);
  }
  return out;
}

std::string describe_stress_intensities(bool markdown) {
  std::string out;
  for (const auto& mode : stress_mode_registry())
    out += describe_fields(mode.intensities, "stress_profile." + mode.name, markdown);
  return out;
}

}  // namespace rcl
