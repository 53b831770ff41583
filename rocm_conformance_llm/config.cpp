#include "rocm_conformance_llm/config.hpp"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

constexpr int64_t MiB = int64_t{1} << 20;

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

// Presets. `smoke` finishes in seconds on 2 CPU cores; `small` and `large` are sized for one
// GPU (an MI250/MI300-class device for `large`). Stress intensities scale with the preset.
// The GPU presets have real models' shapes and vocabularies, so the LM-head GEMM and the
// cross-entropy over the vocabulary weigh what they weigh in real training: `small` is GPT-2
// small (50257 tokens); `large` is Llama 3.2 1B (hidden 2048, 16 layers, 32 query and 8
// key/value heads, SwiGLU width 8192, RMSNorm, rotary, 128256 tokens, tied LM head).
constexpr int64_t kGpt2Vocab = 50257;
constexpr int64_t kLlama3Vocab = 128256;
std::vector<Preset> make_presets() {
  // Rotary positions and a high LR let 2 layers learn the copy spans within 300 steps.
  const Preset smoke{
      .name = "smoke",
      .description = "CPU-sized: learns the synthetic corpus to near its loss floor in seconds (tests, CI)",
      .training = {.hidden_size = 64,
                   .num_layers = 2,
                   .batch_size = 16,
                   .seq_len = 64,
                   .num_heads = 4,
                   .position = PositionEncoding::rotary,
                   .steps = 300,
                   .learning_rate = 1e-2,
                   .warmup_steps = 10,
                   .eval_interval = 50,
                   .eval_batches = 4},
      .stress = nlohmann::json{
          {"gemm", {{"min_hidden_size", 128}, {"min_ffn_multiplier", 4.0}, {"precision", "bf16"}}},
          {"rng", {{"min_dropout", 0.1}, {"min_drop_path", 0.1}, {"replay_check_interval", 50}}},
          {"comm",
           {{"max_batch_size", 8},
            {"max_checksum_interval", 10},
            {"max_collective_check_interval", 50},
            {"min_collective_message_mb", 1.0}}},
          {"memory", {{"min_seq_len", 128}, {"min_grad_accum_steps", 2}, {"memory_pressure_bytes", 64 * MiB}}},
          {"fusion", {{"min_num_layers", 4}, {"activation", "swiglu"}, {"qkv_conv_kernel", 3}}},
          {"attention", {{"pad_fraction", 0.25}, {"probe_interval", 50}, {"probe_seq_len", 256}}}}};

  nlohmann::json cpu_medium_stress = smoke.stress.values();
  cpu_medium_stress.merge_patch({{"gemm", {{"min_hidden_size", 512}}},
                                 {"rng", {{"replay_check_interval", 20}}},
                                 {"memory", {{"min_seq_len", 512}}},
                                 {"fusion", {{"min_num_layers", 8}}}});
  const Preset cpu_medium{.name = "cpu-medium",
                          .description = "A larger CPU model for benchmarks (minutes, not seconds)",
                          .training = {.hidden_size = 256,
                                       .num_layers = 4,
                                       .batch_size = 8,
                                       .seq_len = 128,
                                       .num_heads = 8,
                                       .steps = 40,
                                       .learning_rate = 1e-3},
                          .stress = cpu_medium_stress};

  const Preset small{.name = "small",
                     .description = "One GPU, GPT-2-small shape and vocabulary (default when a GPU is present)",
                     .training = {.hidden_size = 768,
                                  .num_layers = 12,
                                  .batch_size = 8,
                                  .seq_len = 1024,
                                  .mixed_precision = Precision::bf16,
                                  .num_heads = 12,
                                  .vocab_size = kGpt2Vocab,
                                  .steps = 500,
                                  .learning_rate = 6e-4,
                                  .warmup_steps = 50,
                                  .eval_interval = 100,
                                  .eval_batches = 8},
                     .stress = nlohmann::json{
                         {"gemm", {{"min_hidden_size", 2048}, {"min_ffn_multiplier", 4.0}, {"precision", "bf16"}}},
                         {"rng", {{"min_dropout", 0.1}, {"min_drop_path", 0.1}, {"replay_check_interval", 50}}},
                         {"comm",
                          {{"max_batch_size", 2},
                           {"max_checksum_interval", 10},
                           {"max_collective_check_interval", 50},
                           {"min_collective_message_mb", 16.0}}},
                         {"memory", {{"min_seq_len", 8192}, {"min_grad_accum_steps", 8}, {"memory_pressure_bytes", 0}}},
                         {"fusion", {{"min_num_layers", 24}, {"activation", "swiglu"}, {"qkv_conv_kernel", 3}}},
                         {"attention", {{"pad_fraction", 0.25}, {"probe_interval", 50}, {"probe_seq_len", 2048}}}}};

  // `large` scales `small`'s intensities up where its memory allows.
  nlohmann::json large_stress = small.stress.values();
  large_stress.merge_patch(
      {{"gemm", {{"min_hidden_size", 4096}}},
       {"rng", {{"replay_check_interval", 100}}},
       {"comm", {{"max_checksum_interval", 20}}},
       {"memory", {{"min_seq_len", 16384}, {"min_grad_accum_steps", 16}, {"memory_pressure_bytes", 8 * 1024 * MiB}}},
       {"fusion", {{"min_num_layers", 48}}},
       {"attention", {{"probe_seq_len", 4096}}}});
  const Preset large{.name = "large",
                     .description = "MI300-class memory (192 GB): Llama-3.2-1B shape, GQA and vocabulary",
                     .training = {.hidden_size = 2048,
                                  .num_layers = 16,
                                  .ffn_multiplier = 6.0,
                                  .batch_size = 8,
                                  .seq_len = 2048,
                                  .mixed_precision = Precision::bf16,
                                  .num_heads = 32,
                                  .num_key_value_heads = 8,
                                  .vocab_size = kLlama3Vocab,
                                  .position = PositionEncoding::rotary,
                                  .norm = NormKind::rmsnorm,
                                  .activation = Activation::swiglu,
                                  .steps = 1000,
                                  .learning_rate = 3e-4,
                                  .warmup_steps = 100,
                                  .eval_interval = 200,
                                  .eval_batches = 8},
                     .stress = large_stress};

  return {smoke, cpu_medium, small, large};
}

}  // namespace

Capabilities Capabilities::of_this_build(bool gpu) {
  return {.torch_major = TORCH_VERSION_MAJOR, .torch_minor = TORCH_VERSION_MINOR, .gpu = gpu};
}

AttentionBackend resolve_attention_backend(AttentionBackend requested, const Capabilities& caps) {
  if (requested != AttentionBackend::automatic) return requested;
  return caps.gpu && caps.torch_major >= 2 ? AttentionBackend::sdpa : AttentionBackend::math;
}

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

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset& find_preset(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  throw ConfigError("unknown preset '" + name + "': known presets are " + join(names));
}

std::string default_preset_name(bool gpu_present) { return gpu_present ? "small" : "smoke"; }

namespace {
// Steps high enough that max_duration_s is what ends a timed level.
constexpr int64_t kUntilTimeUp = 1'000'000'000;

// Check intervals grow with the level: a CI gate looks often at a short run, a soak less often
// at a long one (a canary every 50 steps of an 8-hour run would be thousands of GEMM checks).
std::vector<RunLevel> make_run_levels() {
  return {
      {1,
       "quick",
       "CI gate, about 2 minutes: the preset's model, no stress mode, every check early",
       "",
       "",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 120.0}}},
        {"diagnostics", {{"gemm_canary_interval", 25}, {"fingerprint_interval", 25}, {"telemetry_interval_s", 2.0}}}}},
      {2,
       "standard",
       "15 minutes: GEMM, RNG and collective stress",
       "",
       "gemm,rng,comm",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 900.0}, {"checksum_interval", 10}}},
        {"diagnostics",
         {{"gemm_canary_interval", 100}, {"fingerprint_interval", 100}, {"telemetry_interval_s", 5.0}}}}},
      {3,
       "extended",
       "1 hour: every stress mode",
       "",
       "all",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 3600.0}, {"checksum_interval", 20}}},
        {"diagnostics",
         {{"gemm_canary_interval", 200}, {"fingerprint_interval", 200}, {"telemetry_interval_s", 10.0}}}}},
      {4,
       "soak",
       "8 hours: every stress mode, sparse checks (the hangs seen after hours)",
       "",
       "all",
       {{"training", {{"steps", kUntilTimeUp}, {"max_duration_s", 8 * 3600.0}, {"checksum_interval", 50}}},
        {"diagnostics",
         {{"gemm_canary_interval", 500}, {"fingerprint_interval", 500}, {"telemetry_interval_s", 30.0}}}}},
  };
}
}  // namespace

const std::vector<RunLevel>& run_levels() {
  static const std::vector<RunLevel> all = make_run_levels();
  return all;
}

const RunLevel& find_run_level(int level) {
  std::vector<std::string> known;
  for (const auto& l : run_levels()) {
    if (l.level == level) return l;
    known.push_back(std::to_string(l.level) + " (" + l.name + ")");
  }
  throw ConfigError("invalid --level " + std::to_string(level) + ": allowed levels are " + join(known));
}

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
