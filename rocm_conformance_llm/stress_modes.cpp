#include "rocm_conformance_llm/stress_modes.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

std::vector<StressMode> builtin_modes() {
  return {
      // rocBLAS / hipBLASLt: wider hidden and FFN make bigger, differently shaped GEMMs
      // (QKV, projections, MLP, LM head), and bf16/fp16 send them down the reduced-precision
      // Tensile / hipBLASLt kernels, where precision-only NaNs and shape-specific bugs live.
      // hidden_size is rounded up so every head gets a multiple of 8 dimensions: keeps
      // hidden % heads == 0 and the GEMMs on tile-friendly sizes. Heads are added first so the
      // wider hidden does not widen each head past 128: the fused attention kernels' fast range
      // (flash and memory-efficient SDPA, AOTriton/CK on ROCm), which `small`'s 12 heads over
      // 2048 (head_dim 176) left by accident. A profile may raise the ceiling to stress them.
      // The preset's learning rate and init are tuned for its own width, so widening from h to h'
      // scales them as the public anchors do: the learning rate by h / h' (GPT-3's table: 6e-4
      // at d=768, 2.0e-4 at d=2048, Brown et al. 2020, Table 2.1) and the init std by
      // sqrt(h / h') (GPT-NeoX's small_init, sqrt(2 / 5d), Nguyen & Salazar 2019), so `small`'s
      // own width keeps 0.02. The composed `small` (then d=2112) had kept 6e-4 and 0.02 (its H200 run
      // went 11.23 -> 16.11 at step 2, docs/gpu-run.md; bench/composed-lr.md).
      {.name = "gemm",
       .targets = "rocBLAS, hipBLASLt",
       .components = {component::rocblas},
       .summary = "wider hidden and FFN layers, bf16/fp16 GEMMs, learning rate and init scaled to the width",
       .intensities = {{"min_hidden_size", 256, at_least(1), "hidden_size floor"},
                       {"min_ffn_multiplier", 4.0, above(0), "ffn_multiplier floor"},
                       {"precision", "bf16", one_of({"bf16", "fp16"}), "mixed_precision used when the base is fp32"},
                       {"max_head_dim", 128, at_least(8),
                        "head_dim ceiling: num_heads is raised so hidden_size / num_heads stays at most this "
                        "(rounded up to a multiple of 8)"},
                       {"learning_rate_width_exponent", 1.0, at_least(0, "0 = keep the base's"),
                        "widening h -> h' multiplies learning_rate by (h / h')^this"},
                       {"init_std_width_exponent", 0.5, at_least(0, "0 = keep the base's"),
                        "widening h -> h' multiplies init_std by (h / h')^this"}},
       .rules = {raise_count_to_share_at_most("num_heads", intensity("max_head_dim"), "hidden_size",
                                              "min_hidden_size", "num_key_value_heads"),
                 inversely_scaling(
                     raise_to_multiple("hidden_size", intensity("min_hidden_size"), "num_heads", 8),
                     {{"learning_rate", "learning_rate_width_exponent"}, {"init_std", "init_std_width_exponent"}}),
                 raise_to("ffn_multiplier", intensity("min_ffn_multiplier")),
                 replace("mixed_precision", "fp32", intensity("precision"))}},
      // rocRAND: dropout and stochastic depth draw Philox masks every step on every layer;
      // deterministic algorithms plus rewind-and-replay checks make any RNG drift visible.
      // Seeds are always fixed (--seed, default 1234); this mode adds the checks. Deterministic
      // algorithms only around the steps a replay compares ("replay"): on every step they cost
      // the fused attention backward its parallelism over keys (docs/stress-modes.md).
      {.name = "rng",
       .targets = "rocRAND",
       .components = {component::rocrand},
       .summary = "more dropout, stochastic depth, deterministic kernels, replay checks",
       .intensities = {{"min_dropout", 0.1, within(0, 1, false), "dropout floor"},
                       {"min_drop_path", 0.1, within(0, 1, false), "drop_path floor"},
                       {"replay_check_interval", 20, at_least(1), "replay checks at least every this many steps"}},
       .rules = {raise_to("dropout", intensity("min_dropout")), raise_to("drop_path", intensity("min_drop_path")),
                 raise_to("determinism", fixed("replay")),
                 at_least_every("replay_check_interval", intensity("replay_check_interval"))}},
      // RCCL: small per-device batches make compute short relative to communication, and an
      // all-reduce after every micro-step multiplies the collectives per optimizer step;
      // per-rank logs and frequent cross-rank checksums expose stragglers and desyncs. The
      // collective battery verifies and times every kind training uses (all-reduce, all-gather,
      // reduce-scatter, uneven all-to-all, broadcast) in fp32/bf16/int64 at sizes either side of
      // RCCL's protocol thresholds, where its public wrong-result and hang reports cluster.
      // ZeRO sharding puts reduce-scatter and all-gather into every training step, as sharded
      // jobs issue them; tensor parallelism adds its all-reduces inside every block, on subgroups
      // of the world; experts (where moe_experts is not set) route tokens by uneven all-to-alls.
      // All three are no-ops on one rank (recorded: config.json parallel_layout.notes).
      {.name = "comm",
       .targets = "RCCL",
       .components = {component::rccl},
       .summary = "smaller batches, gradient sync every micro-step, ZeRO sharding, tensor parallel, expert-parallel "
                  "MoE, per-rank logs, every collective kind verified",
       .intensities = {{"max_batch_size", 4, at_least(1), "batch_size ceiling"},
                       {"max_checksum_interval", 5, at_least(1), "cross-rank checksums at least every this many steps"},
                       {"max_collective_check_interval", 50, at_least(1),
                        "collective batteries at least every this many steps"},
                       {"min_collective_message_mb", 16.0, above(0), "collective_check_max_mb floor"},
                       {"min_distributed_tensor_parallel_degree", 2, at_least(1),
                        "distributed_tensor_parallel_degree floor (a tensor split where the world keeps two or more "
                        "data-parallel ranks)"},
                       {"min_distributed_moe_experts", 4, at_least(1),
                        "distributed_moe_experts floor (experts where moe_experts is 0 and several data-parallel ranks "
                        "shard them)"}},
       .rules = {lower_to("batch_size", intensity("max_batch_size")), lower_to("grad_sync_interval", fixed(1)),
                 switch_on("log_per_rank"), raise_to("data_parallel", fixed("zero")),
                 raise_to("distributed_tensor_parallel_degree", intensity("min_distributed_tensor_parallel_degree")),
                 raise_to("distributed_moe_experts", intensity("min_distributed_moe_experts")),
                 at_least_every("checksum_interval", intensity("max_checksum_interval")),
                 at_least_every("collective_check_interval", intensity("max_collective_check_interval")),
                 raise_to("collective_check_max_mb", intensity("min_collective_message_mb"))}},
      // ROCr allocator: long sequences make large, irregular activation allocations;
      // checkpointing frees and re-allocates them in backward; accumulation keeps gradients
      // alive across micro-steps; ballast shrinks the headroom the caching allocator has.
      {.name = "memory",
       .targets = "ROCr memory allocator (HIP caching allocator)",
       .components = {component::allocator},
       .summary = "long sequences, activation checkpointing, more accumulation, optional ballast",
       .intensities = {{"min_seq_len", 8192, at_least(1), "seq_len floor"},
                       {"min_grad_accum_steps", 4, at_least(1), "grad_accum_steps floor"},
                       {"memory_pressure_bytes", 0, at_least(0), "device ballast floor (0: no artificial pressure)"}},
       // On a GPU the long sequences go through fused SDPA, the attention mode's own rule: with
       // the math path one score tensor is batch x heads x seq^2 (12.9 GB in bf16 at `small`,
       // 8 x 12 x 8192^2; 29.7 s/step measured on an H100, docs/gpu-run.md).
       .rules = {raise_to("seq_len", intensity("min_seq_len")),
                 only_where({.torch_major = 2, .gpu = true}, replace("attention_backend", "math", fixed("sdpa"))),
                 switch_on("activation_checkpointing"), raise_to("grad_accum_steps", intensity("min_grad_accum_steps")),
                 raise_to("memory_pressure_bytes", intensity("memory_pressure_bytes"))}},
      // MIOpen: deeper stacks with sandwich and QK norms multiply the normalisation kernels,
      // SwiGLU/GELU add fused elementwise kernels, and the depthwise causal conv on Q/K/V is
      // a convolution, which on ROCm goes through MIOpen's Find/solver machinery.
      {.name = "fusion",
       .targets = "MIOpen (and fused elementwise/norm kernels)",
       .components = {component::miopen},
       .summary = "deeper residual stack, more LayerNorms, SwiGLU/GELU, depthwise conv on Q/K/V",
       .intensities = {{"min_num_layers", 24, at_least(1), "num_layers floor"},
                       {"activation", "swiglu", one_of_names<Activation>(), "MLP activation to use"},
                       {"qkv_conv_kernel", 3, at_least(0), "qkv_conv_kernel floor"}},
       .rules = {raise_to("num_layers", intensity("min_num_layers")), set_to("norm_layout", fixed("sandwich")),
                 switch_on("qk_norm"), set_to("activation", intensity("activation")),
                 raise_to("qkv_conv_kernel", intensity("qkv_conv_kernel"))}},
      // AOTriton / CK fused attention (MIOpen where it serves them): SDPA lets libtorch pick
      // its fused kernels, on padded batches with a padding mask (memory-efficient SDPA gave
      // wrong results with one on ROCm 6.2 / AOTriton 0.8.0, pytorch/pytorch#147460: max diff
      // 1.73 vs math) and a strided V (ROCm/pytorch#3230); the parity probe runs the model's
      // own Q/K/V through every backend against float64 math, also at a longer sequence.
      // The training seq_len is the memory mode's: `--stress attention,memory` trains long
      // sequences through the fused kernels.
      {.name = "attention",
       .targets = "AOTriton/CK flash and memory-efficient SDPA (MIOpen where it serves them)",
       .components = {component::attention},
       .summary = "fused SDPA, padded batches with a padding mask, strided V, parity probe at a longer sequence",
       .intensities = {{"pad_fraction", 0.25, within(0, 1, false), "attention_pad_fraction floor"},
                       {"probe_interval", 50, at_least(1), "parity probes at least every this many steps"},
                       {"probe_seq_len", 1024, at_least(1), "attention_probe_seq_len floor"}},
       .rules = {replace("attention_backend", "math", fixed("sdpa")),
                 raise_to("attention_pad_fraction", intensity("pad_fraction")), switch_on("attention_noncontiguous_v"),
                 at_least_every("attention_probe_interval", intensity("probe_interval")),
                 raise_to("attention_probe_seq_len", intensity("probe_seq_len"))},
       .requires_capability = {.torch_major = 2}},
  };
}

Registry<StressMode>& stress_mode_table() {
  static Registry<StressMode> modes(builtin_modes());
  return modes;
}

const StressMode& find_mode(const std::string& name) {
  for (const auto& mode : stress_mode_registry())
    if (mode.name == name) return mode;
  throw ConfigError("unknown stress mode '" + name + "'");
}

StressRule make_rule(std::string field, StressOp op, RuleValue value) {
  return {.field = std::move(field),
          .op = op,
          .intensity = std::move(value.intensity),
          .literal = std::move(value.literal)};
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

StressRule raise_to(std::string field, RuleValue value) {
  return make_rule(std::move(field), StressOp::kAtLeast, std::move(value));
}
StressRule raise_to_multiple(std::string field, RuleValue value, std::string read_field, int64_t factor) {
  StressRule rule = raise_to(std::move(field), std::move(value));
  rule.multiple_of = std::move(read_field);
  rule.multiple_factor = factor;
  return rule;
}
StressRule raise_count_to_share_at_most(std::string count_field, RuleValue cap, std::string width_field,
                                        std::string width_floor, std::string aligned_to) {
  StressRule rule = make_rule(std::move(count_field), StressOp::kShareAtMost, std::move(cap));
  rule.width = std::move(width_field);
  rule.width_floor = std::move(width_floor);
  rule.aligned_to = std::move(aligned_to);
  return rule;
}
StressRule inversely_scaling(StressRule rule, std::vector<InverseScale> scales) {
  rule.inverse_scales = std::move(scales);
  return rule;
}
StressRule lower_to(std::string field, RuleValue value) {
  return make_rule(std::move(field), StressOp::kAtMost, std::move(value));
}
StressRule switch_on(std::string field) { return make_rule(std::move(field), StressOp::kSwitchOn, fixed(true)); }
StressRule at_least_every(std::string field, RuleValue value) {
  return make_rule(std::move(field), StressOp::kEvery, std::move(value));
}
StressRule set_to(std::string field, RuleValue value) {
  return make_rule(std::move(field), StressOp::kSet, std::move(value));
}
StressRule replace(std::string field, nlohmann::json replaced, RuleValue value) {
  StressRule rule = make_rule(std::move(field), StressOp::kReplace, std::move(value));
  rule.replaces = std::move(replaced);
  return rule;
}
StressRule only_where(CapabilityRequirement when, StressRule rule) {
  rule.when = when;
  return rule;
}

std::string CapabilityRequirement::describe() const {
  std::vector<std::string> parts;
  if (torch_major > 0 || torch_minor > 0) parts.push_back(fmt::format("libtorch >= {}.{}", torch_major, torch_minor));
  if (gpu) parts.push_back("GPU");
  return join(parts);
}

std::string CapabilityRequirement::unmet(const Capabilities& c) const {
  std::vector<std::string> reasons;
  if (std::pair(c.torch_major, c.torch_minor) < std::pair(torch_major, torch_minor))
    reasons.push_back(fmt::format("needs libtorch >= {}.{} (this build has {}.{})", torch_major, torch_minor,
                                  c.torch_major, c.torch_minor));
  if (gpu && !c.gpu) reasons.push_back("needs a GPU (this run is on the CPU)");
  return join(reasons, "; ");
}

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
                         code(rule.width),
                         markdown ? "*" + rule.width_floor + "*" : "<" + rule.width_floor + ">", value,
                         code(rule.aligned_to));
  }
  return field;
}
}  // namespace

std::string describe_rule(const StressRule& rule, bool markdown) {
  const std::string when = rule.when.describe();
  return describe_op(rule, markdown) + (when.empty() ? "" : " (with " + when + ")");
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

StressComposition compose_stress_modes(const TrainingConfig& base, const std::vector<std::string>& modes,
                                       const StressProfile& profile, const Capabilities& caps) {
  StressComposition out;
  // The rules see the backend the run will use (a run resolves its base before this; a
  // composition of a preset or a hand-built config resolves it here, the same way).
  TrainingConfig resolved = base;
  resolved.attention_backend = resolve_attention_backend(base.attention_backend, caps);
  nlohmann::json config = resolved;
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
