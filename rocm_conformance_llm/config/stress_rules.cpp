// Building, applying and describing one stress rule (config/stress_rules.hpp).
#include "rocm_conformance_llm/config/stress_rules.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/config/fields.hpp"

namespace rcl {
namespace {

StressRule make_rule(TrainingField field, StressOp op, RuleValue value) {
  return {.field = field, .op = op, .intensity = std::move(value.intensity), .literal = std::move(value.literal)};
}

int64_t round_up(int64_t x, int64_t step) { return (x + step - 1) / step * step; }

std::string value_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The allowed values of a one_of training field, weakest first (e.g. determinism: off, replay, all).
const std::vector<std::string>& ordered_values(const std::string& field) {
  for (const auto& f : training_fields())
    if (f.name == field) return f.check.allowed;
  throw ConfigError("no training field '" + field + "'");
}

// `slot` < `value`: numbers by value, a one_of string by its place in the field's allowed list.
bool below(const std::string& field, const nlohmann::json& slot, const nlohmann::json& value) {
  if (!slot.is_string()) return slot < value;
  const auto& order = ordered_values(field);
  return std::find(order.begin(), order.end(), slot.get<std::string>()) <
         std::find(order.begin(), order.end(), value.get<std::string>());
}

}  // namespace

RuleValue intensity(std::string key) { return {.intensity = std::move(key)}; }
RuleValue fixed(nlohmann::json literal) { return {.literal = std::move(literal)}; }

StressRule raise_to(TrainingField field, RuleValue value) {
  return make_rule(field, StressOp::kAtLeast, std::move(value));
}
StressRule raise_to_multiple(TrainingField field, RuleValue value, TrainingField read_field, int64_t factor) {
  StressRule rule = raise_to(field, std::move(value));
  rule.multiple_of = read_field;
  rule.multiple_factor = factor;
  return rule;
}
StressRule raise_count_to_share_at_most(TrainingField count_field, RuleValue cap, TrainingField width_field,
                                        std::string width_floor, TrainingField aligned_to) {
  StressRule rule = make_rule(count_field, StressOp::kShareAtMost, std::move(cap));
  rule.width = width_field;
  rule.width_floor = std::move(width_floor);
  rule.aligned_to = aligned_to;
  return rule;
}
StressRule inversely_scaling(StressRule rule, std::vector<InverseScale> scales) {
  rule.inverse_scales = std::move(scales);
  return rule;
}
StressRule lower_to(TrainingField field, RuleValue value) {
  return make_rule(field, StressOp::kAtMost, std::move(value));
}
StressRule switch_on(TrainingField field) { return make_rule(field, StressOp::kSwitchOn, fixed(true)); }
StressRule at_least_every(TrainingField field, RuleValue value) {
  return make_rule(field, StressOp::kEvery, std::move(value));
}
StressRule set_to(TrainingField field, RuleValue value) { return make_rule(field, StressOp::kSet, std::move(value)); }
StressRule replace(TrainingField field, nlohmann::json replaced, RuleValue value) {
  StressRule rule = make_rule(field, StressOp::kReplace, std::move(value));
  rule.replaces = std::move(replaced);
  return rule;
}
StressRule only_where(CapabilityRequirement when, StressRule rule) {
  rule.when = when;
  return rule;
}

void apply_stress_rule(const StressRule& rule, const nlohmann::json& intensities, nlohmann::json& config) {
  const nlohmann::json& value = rule.intensity.empty() ? rule.literal : intensities.at(rule.intensity);
  nlohmann::json& slot = config.at(rule.field);
  switch (rule.op) {
    case StressOp::kAtLeast: {
      const nlohmann::json before = slot;
      if (below(rule.field, slot, value)) slot = value;
      if (!rule.multiple_of.empty())
        slot = round_up(slot.get<int64_t>(), config.at(rule.multiple_of).get<int64_t>() * rule.multiple_factor);
      // A widened field rescales what was tuned for its old value (the gemm mode's learning rate and init).
      if (slot != before && before.is_number() && slot.is_number()) {
        const double ratio = before.get<double>() / slot.get<double>();
        for (const auto& scale : rule.inverse_scales) {
          nlohmann::json& scaled = config.at(scale.field);
          scaled = scaled.get<double>() * std::pow(ratio, intensities.at(scale.exponent).get<double>());
        }
      }
      return;
    }
    case StressOp::kShareAtMost: {
      const int64_t width =
          std::max(config.at(rule.width).get<int64_t>(), intensities.at(rule.width_floor).get<int64_t>());
      int64_t count = round_up(width, value.get<int64_t>()) / value.get<int64_t>();
      if (const int64_t align = config.at(rule.aligned_to).get<int64_t>(); align > 0) count = round_up(count, align);
      if (slot.get<int64_t>() < count) slot = count;
      return;
    }
    case StressOp::kAtMost:
      if (value < slot) slot = value;
      return;
    case StressOp::kSwitchOn:
    case StressOp::kSet: slot = value; return;
    case StressOp::kEvery:  // 0 means off, so any positive interval tightens it
      if (slot == 0 || value < slot) slot = value;
      return;
    case StressOp::kReplace:
      if (slot == rule.replaces) slot = value;
      return;
  }
}

namespace {
std::string describe_op(const StressRule& rule, bool markdown) {
  const auto code = [&](const std::string& s) { return markdown ? "`" + s + "`" : s; };
  const std::string field = code(rule.field);
  const std::string value = rule.intensity.empty()
                                ? value_text(rule.literal)
                                : (markdown ? "*" + rule.intensity + "*" : "<" + rule.intensity + ">");
  switch (rule.op) {
    case StressOp::kAtLeast: {
      if (rule.literal.is_string())
        return field + " >= " + value + " (" + join(ordered_values(rule.field), " < ") + ")";
      std::string text = field + " >= " + value +
                         (rule.multiple_of.empty() ? ""
                                                   : fmt::format(", rounded up to a multiple of {} x {}",
                                                                 rule.multiple_factor, code(rule.multiple_of)));
      for (const auto& scale : rule.inverse_scales)
        text += fmt::format(", {} x (old / new {})^{}", code(scale.field), field,
                            markdown ? "*" + scale.exponent + "*" : "<" + scale.exponent + ">");
      return text;
    }
    case StressOp::kAtMost: return field + " <= " + value;
    case StressOp::kSwitchOn: return field + " on";
    case StressOp::kEvery: return field + " at least every " + value + " (0 = off counts as never)";
    case StressOp::kSet: return field + " = " + value;
    case StressOp::kReplace: return field + " " + value_text(rule.replaces) + " -> " + value;
    case StressOp::kShareAtMost:
      return fmt::format("{} >= max({}, {}) / {}, rounded up to a multiple of {} (where not 0)", field,
                         code(rule.width), markdown ? "*" + rule.width_floor + "*" : "<" + rule.width_floor + ">",
                         value, code(rule.aligned_to));
  }
  return field;
}
}  // namespace

std::string describe_rule(const StressRule& rule, bool markdown) {
  const std::string when = rule.when.describe();
  return describe_op(rule, markdown) + (when.empty() ? "" : " (with " + when + ")");
}

}  // namespace rcl
