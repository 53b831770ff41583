// Stress modes as data: each mode is a registry entry with its intensities and a list of
// rules, each rule one monotone change to one TrainingConfig field.
//
// Why composition is order-independent: every rule only raises a field to at least its
// intensity, lowers it to at most, switches it on, tightens an every-N interval, or sets it to
// one value; no two modes write the same field, and no mode writes a field another mode reads
// (tests check this for the whole registry; two modes may write one field with the very same
// rule, which commutes with itself). A mode may read the fields it writes itself: its rules
// apply in their declared order, and no other mode's rule can come between them. Such changes commute, and applying one twice
// changes nothing, so `--stress a,b` == `--stress b,a` == `--stress a,a,b`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/registration.hpp"
#include "rocm_conformance_llm/config.hpp"

namespace rcl {

enum class StressOp {
  kAtLeast,   // raise to at least the value (optionally rounded up to a multiple of a read field);
              // a string field (one_of) is ordered by its allowed list, e.g. off < replay < all
  kAtMost,    // lower to at most the value
  kSwitchOn,  // set a bool to true
  kEvery,     // an every-N-steps interval at least this often (0 = off counts as never)
  kSet,       // set to the value (a string enum)
  kReplace,   // replace one specific value (`replaces`) by the value, leave any other alone
  kShareAtMost,  // raise a count until a width split over it gives each part at most the value:
                 // count >= ceil(max(width field, width floor) / value), a multiple of `aligned_to`
};

// What a mode or rule needs of the run's Capabilities (config.hpp); a mode whose requirement
// does not hold is skipped with the reason.
struct CapabilityRequirement {
  int torch_major = 0;  // libtorch >= torch_major.torch_minor (0.0: any)
  int torch_minor = 0;
  bool gpu = false;                                // needs a GPU
  std::string describe() const;                    // "libtorch >= 2.0, GPU", or "" for none
  std::string unmet(const Capabilities& c) const;  // "" when it holds, else the reason
};

// A field that shrinks as a raise rule grows its own: when the rule raises its field from a to
// b, `field` is multiplied by (a / b)^exponent, the exponent being the mode's intensity
// `exponent` (0: left alone). E.g. a learning rate tuned for a width, for a wider model.
struct InverseScale {
  std::string field;
  std::string exponent;
};

// One change to one TrainingConfig field (and the fields it scales). The value is the mode's
// intensity `intensity`, or the fixed `literal` when `intensity` is empty.
struct StressRule {
  std::string field;
  StressOp op = StressOp::kSet;
  std::string intensity{};
  nlohmann::json literal{};
  nlohmann::json replaces{};     // kReplace only
  std::string multiple_of{};     // kAtLeast only: a read field; a raised value is rounded up to
  int64_t multiple_factor = 1;   // a multiple of multiple_factor × that field
  std::string width{};           // kShareAtMost only: the read field split over the count,
  std::string width_floor{};     // the intensity that width is raised to by the mode's own rule,
  std::string aligned_to{};      // and a read field the count stays a multiple of (0: any count)
  CapabilityRequirement when{};  // the rule applies only where the run meets this
  std::vector<InverseScale> inverse_scales{};  // kAtLeast on a number only: scaled when it raises
};

// Where a rule's value comes from.
struct RuleValue {
  std::string intensity{};
  nlohmann::json literal{};
};
RuleValue intensity(std::string key);
RuleValue fixed(nlohmann::json literal);

StressRule raise_to(std::string field, RuleValue value);
// raise_to, then rounded up to a multiple of factor × `read_field` (also where the field was
// already above the value: the read field may have been raised by the mode's earlier rule).
StressRule raise_to_multiple(std::string field, RuleValue value, std::string read_field, int64_t factor);
// count >= ceil(max(`width_field`, <width_floor>) / <cap>), rounded up to a multiple of
// `aligned_to` where that is not 0: so the width, raised to its floor and split over the count,
// gives each part at most the cap (num_heads for a head_dim ceiling).
StressRule raise_count_to_share_at_most(std::string count_field, RuleValue cap, std::string width_field,
                                        std::string width_floor, std::string aligned_to);
// `rule` (a numeric raise), also scaling `scales` by (old / new)^exponent whenever it raises.
StressRule inversely_scaling(StressRule rule, std::vector<InverseScale> scales);
StressRule lower_to(std::string field, RuleValue value);
StressRule switch_on(std::string field);
StressRule at_least_every(std::string field, RuleValue value);
StressRule set_to(std::string field, RuleValue value);
StressRule replace(std::string field, nlohmann::json replaced, RuleValue value);
// `rule`, applied only where the run meets `when` (elsewhere the mode leaves that field alone).
StressRule only_where(CapabilityRequirement when, StressRule rule);

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

// Every known mode, in canonical order (the built-in ones as stress_modes.cpp lists them, then
// modes registered at run time in registration order).
const std::vector<StressMode>& stress_mode_registry();
std::vector<std::string> stress_mode_names();

// Adds a mode until the returned guard is destroyed (tests add throwaway modes this way).
// ConfigError when the name is empty, "all" or taken.
using StressModeRegistration = Registration<StressMode>;
[[nodiscard]] StressModeRegistration register_stress_mode(StressMode mode);

// Applies one rule to the JSON form of a TrainingConfig; `intensities` is the mode's
// {key: value}.
void apply_stress_rule(const StressRule& rule, const nlohmann::json& intensities, nlohmann::json& config);
// The rule in words, e.g. "seq_len >= <min_seq_len>" (an intensity in <>); `markdown` gives
// "`seq_len` >= *min_seq_len*".
std::string describe_rule(const StressRule& rule, bool markdown);

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

// Applies the named modes to `base` in the order given (any order gives the same result);
// modes whose requirement `caps` does not meet change nothing and are listed in `skipped`.
// Intensities missing from `profile` take the mode's declared defaults. `auto` in `base` is
// resolved for `caps` first (resolve_attention_backend): the rules see the backend that runs.
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
