// One stress rule: a monotone change to one TrainingConfig field, its builders, how it is applied
// to a config's JSON and how it is said; the modes that group rules are in stress_modes.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config/capabilities.hpp"
#include "rocm_conformance_llm/config/fields.hpp"

namespace rcl {

enum class StressOp {
  kAtLeast,      // raise to at least the value (optionally rounded up to a multiple of a read field);
                 // a string field (one_of) is ordered by its allowed list, e.g. off < replay < all
  kAtMost,       // lower to at most the value
  kSwitchOn,     // set a bool to true
  kEvery,        // an every-N-steps interval at least this often (0 = off counts as never)
  kSet,          // set to the value (a string enum)
  kReplace,      // replace one specific value (`replaces`) by the value, leave any other alone
  kShareAtMost,  // raise a count until a width split over it gives each part at most the value:
                 // count >= ceil(max(width field, width floor) / value), a multiple of `aligned_to`
};

// A field that shrinks as a raise rule grows its own: when the rule raises its field from a to
// b, `field` is multiplied by (a / b)^exponent, the exponent being the mode's intensity
// `exponent` (0: left alone). E.g. a learning rate tuned for a width, for a wider model.
struct InverseScale {
  InverseScale(TrainingField scaled, std::string exponent_key) : field(scaled), exponent(std::move(exponent_key)) {}
  std::string field;
  std::string exponent;
};

// One change to one TrainingConfig field (and the fields it scales). The value is the mode's
// intensity `intensity`, or the fixed `literal` when `intensity` is empty. The builders below
// take the fields as TrainingField (pointers to members); the rule keeps their table names, as
// the config's JSON, to which it is applied, and its description use them.
struct StressRule {
  std::string field;
  StressOp op = StressOp::kSet;
  std::string intensity{};
  nlohmann::json literal{};
  nlohmann::json replaces{};                   // kReplace only
  std::string multiple_of{};                   // kAtLeast only: a read field; a raised value is rounded up to
  int64_t multiple_factor = 1;                 // a multiple of multiple_factor × that field
  std::string width{};                         // kShareAtMost only: the read field split over the count,
  std::string width_floor{};                   // the intensity that width is raised to by the mode's own rule,
  std::string aligned_to{};                    // and a read field the count stays a multiple of (0: any count)
  CapabilityRequirement when{};                // the rule applies only where the run meets this
  std::vector<InverseScale> inverse_scales{};  // kAtLeast on a number only: scaled when it raises
};

// Where a rule's value comes from.
struct RuleValue {
  std::string intensity{};
  nlohmann::json literal{};
};
RuleValue intensity(std::string key);
RuleValue fixed(nlohmann::json literal);

StressRule raise_to(TrainingField field, RuleValue value);
// raise_to, then rounded up to a multiple of factor × `read_field` (also where the field was
// already above the value: the read field may have been raised by the mode's earlier rule).
StressRule raise_to_multiple(TrainingField field, RuleValue value, TrainingField read_field, int64_t factor);
// count >= ceil(max(`width_field`, <width_floor>) / <cap>), rounded up to a multiple of
// `aligned_to` where that is not 0: so the width, raised to its floor and split over the count,
// gives each part at most the cap (num_heads for a head_dim ceiling).
StressRule raise_count_to_share_at_most(TrainingField count_field, RuleValue cap, TrainingField width_field,
                                        std::string width_floor, TrainingField aligned_to);
// `rule` (a numeric raise), also scaling `scales` by (old / new)^exponent whenever it raises.
StressRule inversely_scaling(StressRule rule, std::vector<InverseScale> scales);
StressRule lower_to(TrainingField field, RuleValue value);
StressRule switch_on(TrainingField field);
StressRule at_least_every(TrainingField field, RuleValue value);
StressRule set_to(TrainingField field, RuleValue value);
StressRule replace(TrainingField field, nlohmann::json replaced, RuleValue value);
// `rule`, applied only where the run meets `when` (elsewhere the mode leaves that field alone).
StressRule only_where(CapabilityRequirement when, StressRule rule);

// Applies one rule to the JSON form of a TrainingConfig; `intensities` is the mode's
// {key: value}.
void apply_stress_rule(const StressRule& rule, const nlohmann::json& intensities, nlohmann::json& config);
// The rule in words, e.g. "seq_len >= <min_seq_len>" (an intensity in <>); `markdown` gives
// "`seq_len` >= *min_seq_len*".
std::string describe_rule(const StressRule& rule, bool markdown);

}  // namespace rcl
