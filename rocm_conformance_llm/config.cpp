// The config document (config.hpp): sections checked against their field tables and read,
// patches and `--set` overrides merged with type checks, `--help-config` text.
#include "rocm_conformance_llm/config.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

template <typename T>
std::string show(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

void require(bool ok, const std::string& field, const std::string& value, const std::string& allowed) {
  if (!ok) throw ConfigError("invalid " + field + "=" + value + ": " + allowed);
}

// "integer" | "number" | "bool" | "string": the JSON kind a key takes.
std::string kind_of(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  return value.type_name();
}

// Empty when `value` may replace `slot` (same kind; integers stay integers), else why not.
std::string kind_mismatch(const nlohmann::json& slot, const nlohmann::json& value) {
  const bool same_kind = (slot.is_number() && value.is_number()) || (slot.is_boolean() && value.is_boolean()) ||
                         (slot.is_string() && value.is_string());
  if (!same_kind) return std::string("expected a ") + slot.type_name();
  if (slot.is_number_integer() && !value.is_number_integer()) return "expected an integer";
  return "";
}

// A field's value as the error texts show it: numbers as C++ streams them, strings quoted.
std::string show_json(const nlohmann::json& value) {
  if (value.is_string()) return "'" + value.get<std::string>() + "'";
  if (value.is_number_unsigned()) return show(value.get<uint64_t>());
  if (value.is_number_integer()) return show(value.get<int64_t>());
  if (value.is_number_float()) return show(value.get<double>());
  return value.dump();
}

// What `check` allows, as --help-config says it ("" when anything of the type goes).
std::string describe_check(const FieldCheck& c) {
  switch (c.kind) {
    case FieldCheck::kAny: return "";
    case FieldCheck::kAtLeast: return ">= " + show(c.lo) + (c.note.empty() ? "" : " (" + c.note + ")");
    case FieldCheck::kAbove: return "> " + show(c.lo);
    case FieldCheck::kRange: return "[" + show(c.lo) + ", " + show(c.hi) + (c.hi_inclusive ? "]" : ")");
    case FieldCheck::kOneOf: return join(c.allowed, " | ");
  }
  return "";
}

}  // namespace

void validate_field(const nlohmann::json& value, const ConfigField& field, const std::string& path) {
  const std::string wrong_kind = kind_mismatch(field.default_value, value);
  if (!wrong_kind.empty()) throw ConfigError("invalid " + path + "=" + value.dump() + ": " + wrong_kind);
  const FieldCheck& c = field.check;
  if (c.kind == FieldCheck::kAny) return;
  if (c.kind == FieldCheck::kOneOf) {
    const auto text = value.get<std::string>();
    const bool ok = std::find(c.allowed.begin(), c.allowed.end(), text) != c.allowed.end();
    require(ok, path, show_json(value), "allowed: " + join(c.allowed));
    return;
  }
  const double v = value.get<double>();
  bool ok = std::isfinite(v);
  switch (c.kind) {
    case FieldCheck::kAtLeast: ok = ok && v >= c.lo; break;
    case FieldCheck::kAbove: ok = ok && v > c.lo; break;
    case FieldCheck::kRange: ok = ok && v >= c.lo && (c.hi_inclusive ? v <= c.hi : v < c.hi); break;
    default: break;
  }
  require(ok, path, show_json(value),
          std::string("must be ") + (c.kind == FieldCheck::kRange ? "in " : "") + describe_check(c));
}

namespace {
void validate_fields(const nlohmann::json& values, const std::vector<ConfigField>& fields, const std::string& prefix) {
  for (const auto& field : fields) validate_field(values.at(field.name), field, prefix + field.name);
}
}  // namespace

void validate(const TrainingConfig& c) {
  validate_fields(nlohmann::json(c), training_fields(), "");
  // Cross-field checks, once every field is in its own range.
  require(c.hidden_size % c.num_heads == 0, "hidden_size", show(c.hidden_size),
          "must be divisible by num_heads=" + show(c.num_heads));
  require(c.num_key_value_heads == 0 || c.num_heads % c.num_key_value_heads == 0, "num_key_value_heads",
          show(c.num_key_value_heads), "must divide num_heads=" + show(c.num_heads) + " (0 = num_heads)");
  require(c.grad_sync_interval <= c.grad_accum_steps, "grad_sync_interval", show(c.grad_sync_interval),
          "must be <= grad_accum_steps=" + show(c.grad_accum_steps) +
              " (gradients are synchronised at least once per optimizer step)");
  require(c.position != PositionEncoding::rotary || (c.hidden_size / c.num_heads) % 2 == 0, "position", "'rotary'",
          "needs an even head dimension (hidden_size/num_heads=" + show(c.hidden_size / c.num_heads) + ")");
  // Model parallelism: what holds whatever the world. A tensor-parallel degree the heads (or the
  // sequence) do not divide is fitted with the world (plan_parallel_layout), so a stress mode
  // raising it never invalidates a model.
  require(c.moe_experts == 0 || c.moe_top_k <= c.moe_experts, "moe_top_k", show(c.moe_top_k),
          "must be <= moe_experts=" + show(c.moe_experts));
  require(c.distributed_moe_experts == 0 || c.moe_top_k <= c.distributed_moe_experts, "moe_top_k", show(c.moe_top_k),
          "must be <= distributed_moe_experts=" + show(c.distributed_moe_experts));
}

void validate(const DiagnosticsConfig& d) { validate_fields(nlohmann::json(d), diagnostics_fields(), "diagnostics."); }
void validate(const RocmConfig& r) { validate_fields(nlohmann::json(r), rocm_fields(), "rocm."); }

namespace {
template <typename Config>
Config parse_config(const nlohmann::json& values, const std::vector<ConfigField>& fields, const std::string& prefix) {
  validate_fields(values, fields, prefix);  // before the read: an enum key's error names its field
  auto config = values.get<Config>();
  validate(config);
  return config;
}
}  // namespace

TrainingConfig parse_training_config(const nlohmann::json& values) {
  return parse_config<TrainingConfig>(values, training_fields(), "");
}
DiagnosticsConfig parse_diagnostics_config(const nlohmann::json& values) {
  return parse_config<DiagnosticsConfig>(values, diagnostics_fields(), "diagnostics.");
}
RocmConfig parse_rocm_config(const nlohmann::json& values) {
  return parse_config<RocmConfig>(values, rocm_fields(), "rocm.");
}

std::string describe_fields(const std::vector<ConfigField>& fields, const std::string& section, bool markdown) {
  std::string out;
  for (const auto& f : fields) {
    const std::string key = section + "." + f.name;
    const std::string allowed = describe_check(f.check);
    if (markdown) {
      // A `|` inside a cell would end it.
      std::string cell = allowed;
      for (size_t at = cell.find('|'); at != std::string::npos; at = cell.find('|', at + 2)) cell.insert(at, "\\");
      out += "| `" + key + "` | " + kind_of(f.default_value) + " | `" + f.default_value.dump() + "` | " + cell + " | " +
             f.meaning + " |\n";
    } else {
      out += key + " (" + kind_of(f.default_value) + ", default " + f.default_value.dump() +
             (allowed.empty() ? "" : ", " + allowed) + ")\n    " + f.meaning + "\n";
    }
  }
  return out;
}

void merge_json_strict(nlohmann::json& target, const nlohmann::json& patch, const std::string& where) {
  if (!patch.is_object()) throw ConfigError(where + ": expected a JSON object, got " + patch.dump());
  for (const auto& [key, value] : patch.items()) {
    const std::string path = where.empty() ? key : where + "." + key;
    if (!target.contains(key)) {
      std::vector<std::string> known;
      for (const auto& [k, v] : target.items()) known.push_back(k);
      throw ConfigError("unknown config key '" + path + "': known keys are " + join(known));
    }
    auto& slot = target[key];
    if (slot.is_object()) {
      merge_json_strict(slot, value, path);
      continue;
    }
    const std::string wrong_kind = kind_mismatch(slot, value);
    if (!wrong_kind.empty()) throw ConfigError("invalid " + path + "=" + value.dump() + ": " + wrong_kind);
    slot = value;
  }
}

void apply_override(nlohmann::json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("invalid override '" + assignment + "': expected KEY=VALUE, e.g. hidden_size=512");
  std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  // Bare keys name training fields: `--set seq_len=128`.
  if (key.find('.') == std::string::npos) key = "training." + key;

  // Build the nested patch {"a":{"b":value}} and let merge_json_strict check key and type.
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    value = text;  // unquoted strings: `--set norm=rmsnorm`
  }
  nlohmann::json patch = value;
  std::string rest = key;
  std::vector<std::string> parts;
  for (size_t pos; (pos = rest.find('.')) != std::string::npos; rest.erase(0, pos + 1))
    parts.push_back(rest.substr(0, pos));
  parts.push_back(rest);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) patch = nlohmann::json{{*it, patch}};
  merge_json_strict(doc, patch, "");
}

}  // namespace rcl
