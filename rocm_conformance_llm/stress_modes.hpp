// Stress modes as data: each mode is a registry entry with its intensities and a list of
// rules, each rule one monotone change to one TrainingConfig field.
//
// Why composition is order-independent: every rule only raises a field to at least its
// intensity, lowers it to at most, switches it on, tightens an every-N interval, or sets it to
// one value; no two modes write the same field, and no mode writes a field another mode reads
// (tests check this for the whole registry; two modes may write one field with the very same
// rule, which commutes with itself). A mode may read the fields it writes itself: its rules
// apply in their declared order, and no other mode's rule can come between them. Such changes commute, and applying one
// twice changes nothing, so `--stress a,b` == `--stress b,a` == `--stress a,a,b`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/registration.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/config/stress_rules.hpp"

namespace rcl {

struct StressMode {
  std::string name;
  std::string targets;                    // the ROCm components it stresses
  std::vector<std::string> components{};  // the same as component::all names: a skipped mode explains their coverage
  std::string summary;                    // one line: what it changes
  std::vector<ConfigField> intensities;   // stress_profile.<name>.<key>: default, check, meaning
  std::vector<StressRule> rules;
  CapabilityRequirement requires_capability{};

  std::vector<std::string> writes() const;  // the fields its rules change (each rule's, then those it scales)
  std::vector<std::string> reads() const;   // fields its rules read (written by no other mode)
};

// Every known mode, in canonical order (the built-in ones as config/builtin_stress_modes.cpp
// lists them, then modes registered at run time in registration order).
const std::vector<StressMode>& stress_mode_registry();
std::vector<std::string> stress_mode_names();

// Adds a mode until the returned guard is destroyed (tests add throwaway modes this way).
// ConfigError when the name is empty, "all" or taken.
using StressModeRegistration = Registration<StressMode>;
[[nodiscard]] StressModeRegistration register_stress_mode(StressMode mode);

// Every registered intensity at its default, overlaid by `profile` (values coerced to the
// declared type, e.g. 5 -> 5.0 for a number). Presets give only the modes they know.
StressProfile complete_stress_profile(const StressProfile& profile);
// Driven by the registry's declared intensities: unknown keys, wrong types and values outside
// a key's check are ConfigErrors "invalid stress_profile.MODE.KEY=VALUE: ...".
void validate(const StressProfile& profile);

// Parses `--stress` text: comma list, `all` = every mode, duplicates ignored, whitespace
// tolerated. Unknown or empty names are ConfigErrors listing the known modes. The result is
// in canonical order, so it is also the order shown in logs.
std::vector<std::string> parse_stress_list(const std::string& text);

struct StressComposition {
  TrainingConfig training;
  std::map<std::string, std::string> skipped;  // mode -> why its capability requirement failed
};

// `base` with `attention_backend=auto` resolved for `caps` and the precision and dropout `modes`
// leave it with (the gemm mode turns fp32 into bf16, where a CPU's SDPA is the slower kernel; the
// rng mode adds dropout, which a CPU's flash kernel does not take: capabilities.hpp).
// A run calls it once, before the modes, the fit, validation and the model read the config.
TrainingConfig with_attention_resolved(TrainingConfig base, const std::vector<std::string>& modes,
                                       const StressProfile& profile, const Capabilities& caps);

// Applies the named modes to `base` in the order given (any order gives the same result);
// modes whose requirement `caps` does not meet change nothing and are listed in `skipped`.
// Intensities missing from `profile` take the mode's declared defaults. `base` says the
// attention backend that runs (resolved for `caps`, require_resolved): the rules see it.
StressComposition compose_stress_modes(const TrainingConfig& base, const std::vector<std::string>& modes,
                                       const StressProfile& profile, const Capabilities& caps);

// Field-by-field changes: {field: [before, after]} for fields that differ.
nlohmann::json config_diff(const TrainingConfig& before, const TrainingConfig& after);

// What each applied mode changed from `base`: {mode: {field: [before, after]}} (skipped modes
// are absent).
nlohmann::json explain_stress(const TrainingConfig& base, const std::vector<std::string>& modes,
                              const StressProfile& profile, const Capabilities& caps);

// `--list-stress`: per mode its targets, summary and rules; `markdown` gives the table of
// docs/stress-modes.md (mode, targets, rules, reads, capability).
std::string describe_stress_modes(bool markdown);
// `--help-config` entries of every registered intensity (see describe_fields).
std::string describe_stress_intensities(bool markdown);

}  // namespace rcl
