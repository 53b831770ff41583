// Run configuration: the training config the stress modes mutate, the stress intensities,
// the detector thresholds, presets, JSON (de)serialisation and validation.
//
// The entry point every user includes: the pieces are in config/ (enums, field tables and the
// structs, capabilities, the stress profile, presets, run levels); here is the config document:
// sections read from merged JSON and validated, patches and `--set` overrides, `--help-config`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config/capabilities.hpp"
#include "rocm_conformance_llm/config/enums.hpp"
#include "rocm_conformance_llm/config/fields.hpp"
#include "rocm_conformance_llm/config/presets.hpp"
#include "rocm_conformance_llm/config/run_levels.hpp"
#include "rocm_conformance_llm/config/stress_profile.hpp"

namespace rcl {

// Throws ConfigError naming the first invalid field or combination and what is allowed:
// "invalid FIELD=VALUE: ...". (validate(StressProfile) is in stress_modes.hpp: the registry
// declares the intensities.)
void validate(const TrainingConfig& cfg);
void validate(const DiagnosticsConfig& diag);
void validate(const RocmConfig& rocm);

// A section as merged JSON (every key of its table present) checked key by key in table order,
// then read (the enum keys parsed here, once) and validated: validate()'s errors, never a value
// the struct cannot hold. `diagnostics.` and `rocm.` prefix their keys in the errors.
TrainingConfig parse_training_config(const nlohmann::json& values);
DiagnosticsConfig parse_diagnostics_config(const nlohmann::json& values);
RocmConfig parse_rocm_config(const nlohmann::json& values);

// Checks `value` of the key `path` against `field`'s type and check.
void validate_field(const nlohmann::json& value, const ConfigField& field, const std::string& path);

// One `--help-config` entry per field, keys prefixed with `section.`: "KEY (TYPE, default D,
// ALLOWED)" then the meaning; `markdown` gives table rows (| key | type | default | allowed | meaning |).
std::string describe_fields(const std::vector<ConfigField>& fields, const std::string& section, bool markdown);

// Overlay `patch` onto `target` (a JSON object of the same shape): only keys present in
// `patch` change; unknown keys and wrong types are ConfigErrors naming the key.
void merge_json_strict(nlohmann::json& target, const nlohmann::json& patch, const std::string& where);

// `key=value` override into a JSON object, e.g. "hidden_size=512" or "stress_profile.memory.min_seq_len=2048"
// against {"training":..., "stress_profile":..., "diagnostics":...}; bare keys mean training.
void apply_override(nlohmann::json& doc, const std::string& assignment);

}  // namespace rcl
