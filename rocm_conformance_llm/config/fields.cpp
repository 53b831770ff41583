// The field tables as data (training_fields()...) and the sections' JSON form, generated from the
// X-macros of config/fields.hpp.
#include "rocm_conformance_llm/config/fields.hpp"

namespace rcl {

int64_t key_value_heads(const TrainingConfig& cfg) {
  return cfg.num_key_value_heads > 0 ? cfg.num_key_value_heads : cfg.num_heads;
}

Determinism determinism_of(const TrainingConfig& cfg) { return cfg.deterministic ? Determinism::all : cfg.determinism; }

FieldCheck unchecked() { return {}; }
FieldCheck at_least(double lo, std::string note) {
  return {.kind = FieldCheck::kAtLeast, .lo = lo, .note = std::move(note)};
}
FieldCheck above(double lo) { return {.kind = FieldCheck::kAbove, .lo = lo}; }
FieldCheck within(double lo, double hi, bool hi_inclusive) {
  return {.kind = FieldCheck::kRange, .lo = lo, .hi = hi, .hi_inclusive = hi_inclusive};
}
FieldCheck one_of(std::vector<std::string> allowed) {
  return {.kind = FieldCheck::kOneOf, .allowed = std::move(allowed)};
}

#define RCL_FIELD_ROW(type, member, default_value, check, meaning) \
  {#member, nlohmann::json(type(default_value)), check, meaning},

const std::vector<ConfigField>& training_fields() {
  static const std::vector<ConfigField> fields{RCL_TRAINING_FIELDS(RCL_FIELD_ROW)};
  return fields;
}

const std::vector<ConfigField>& diagnostics_fields() {
  static const std::vector<ConfigField> fields{RCL_DIAGNOSTICS_FIELDS(RCL_FIELD_ROW)};
  return fields;
}

const std::vector<ConfigField>& rocm_fields() {
  static const std::vector<ConfigField> fields{RCL_ROCM_FIELDS(RCL_FIELD_ROW)};
  return fields;
}
#undef RCL_FIELD_ROW

namespace {
// A key missing from `j` keeps its default; an enum key's text is parsed with its field's error.
template <typename T>
void read_field(const nlohmann::json& j, const char* key, T& out) {
  if (!j.contains(key)) return;
  if constexpr (NamedEnum<T>) out = parse_enum<T>(j.at(key).get<std::string>(), key);
  else j.at(key).get_to(out);
}
}  // namespace

#define RCL_FIELD_TO_JSON(type, member, ...) j[#member] = c.member;
#define RCL_FIELD_FROM_JSON(type, member, ...) read_field(j, #member, c.member);

void to_json(nlohmann::json& j, const TrainingConfig& c) { RCL_TRAINING_FIELDS(RCL_FIELD_TO_JSON) }
void from_json(const nlohmann::json& j, TrainingConfig& c) { RCL_TRAINING_FIELDS(RCL_FIELD_FROM_JSON) }
void to_json(nlohmann::json& j, const DiagnosticsConfig& c) { RCL_DIAGNOSTICS_FIELDS(RCL_FIELD_TO_JSON) }
void from_json(const nlohmann::json& j, DiagnosticsConfig& c) { RCL_DIAGNOSTICS_FIELDS(RCL_FIELD_FROM_JSON) }
void to_json(nlohmann::json& j, const RocmConfig& c) { RCL_ROCM_FIELDS(RCL_FIELD_TO_JSON) }
void from_json(const nlohmann::json& j, RocmConfig& c){RCL_ROCM_FIELDS(RCL_FIELD_FROM_JSON)}
#undef RCL_FIELD_TO_JSON
#undef RCL_FIELD_FROM_JSON

}  // namespace rcl
