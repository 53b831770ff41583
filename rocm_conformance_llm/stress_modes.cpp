#include "rocm_conformance_llm/stress_modes.hpp"

#include <algorithm>
#include <sstream>

#include "rocm_conformance_llm/utils/strings.hpp"

namespace rcl {
namespace {

// Raise hidden_size to at least `floor`, rounded up so every head gets a multiple of 8
// dimensions: keeps hidden % heads == 0 and the GEMMs on tile-friendly sizes.
int64_t widen_hidden(int64_t hidden, int64_t floor, int64_t heads) {
  const int64_t target = std::max(hidden, floor);
  if (target == hidden) return hidden;
  const int64_t step = heads * 8;
  return (target + step - 1) / step * step;
}

// "At least this often": 0 means off, so any positive interval tightens it.
int64_t at_least_every(int64_t current, int64_t interval) {
  return current == 0 ? interval : std::min(current, interval);
}

std::vector<StressMode> make_registry() {
  return {
      // rocBLAS / hipBLASLt: wider hidden and FFN make bigger, differently shaped GEMMs
      // (QKV, projections, MLP, LM head), and bf16/fp16 send them down the reduced-precision
      // Tensile / hipBLASLt kernels, where precision-only NaNs and shape-specific bugs live.
      {"gemm", "rocBLAS, hipBLASLt", "wider hidden and FFN layers, bf16/fp16 GEMMs",
       {"hidden_size", "ffn_multiplier", "mixed_precision"},
       [](const TrainingConfig& c, const StressProfile& p) {
         TrainingConfig out = c;
         out.hidden_size = widen_hidden(c.hidden_size, p.gemm.min_hidden_size, c.num_heads);
         out.ffn_multiplier = std::max(c.ffn_multiplier, p.gemm.min_ffn_multiplier);
         if (c.mixed_precision == "fp32") out.mixed_precision = p.gemm.precision;
         return out;
       }},
      // rocRAND: dropout and stochastic depth draw Philox masks every step on every layer;
      // deterministic algorithms plus rewind-and-replay checks make any RNG drift visible.
      // Seeds are always fixed (--seed, default 1234); this mode adds the checks.
      {"rng", "rocRAND", "more dropout, stochastic depth, deterministic kernels, replay checks",
       {"dropout", "drop_path", "deterministic", "replay_check_interval"},
       [](const TrainingConfig& c, const StressProfile& p) {
         TrainingConfig out = c;
         out.dropout = std::max(c.dropout, p.rng.min_dropout);
         out.drop_path = std::max(c.drop_path, p.rng.min_drop_path);
         out.deterministic = true;
         out.replay_check_interval = at_least_every(c.replay_check_interval, p.rng.replay_check_interval);
         return out;
       }},
      // RCCL: small per-device batches make compute short relative to communication, and an
      // all-reduce after every micro-step multiplies the collectives per optimizer step;
      // per-rank logs and frequent cross-rank checksums expose stragglers and desyncs.
      {"comm", "RCCL", "smaller batches, gradient all-reduce every micro-step, per-rank logs",
       {"batch_size", "grad_sync_interval", "log_per_rank", "checksum_interval"},
       [](const TrainingConfig& c, const StressProfile& p) {
         TrainingConfig out = c;
         out.batch_size = std::min(c.batch_size, p.comm.max_batch_size);
         out.grad_sync_interval = 1;
         out.log_per_rank = true;
         out.checksum_interval = at_least_every(c.checksum_interval, p.comm.max_checksum_interval);
         return out;
       }},
      // ROCr allocator: long sequences make large, irregular activation allocations;
      // checkpointing frees and re-allocates them in backward; accumulation keeps gradients
      // alive across micro-steps; ballast shrinks the headroom the caching allocator has.
      {"memory", "ROCr memory allocator (HIP caching allocator)",
       "long sequences, activation checkpointing, more accumulation, optional ballast",
       {"seq_len", "activation_checkpointing", "grad_accum_steps", "memory_pressure_bytes"},
       [](const TrainingConfig& c, const StressProfile& p) {
         TrainingConfig out = c;
         out.seq_len = std::max(c.seq_len, p.memory.min_seq_len);
         out.activation_checkpointing = true;
         out.grad_accum_steps = std::max(c.grad_accum_steps, p.memory.min_grad_accum_steps);
         out.memory_pressure_bytes = std::max(c.memory_pressure_bytes, p.memory.memory_pressure_bytes);
         return out;
       }},
      // MIOpen: deeper stacks with sandwich and QK norms multiply the normalisation kernels,
      // SwiGLU/GELU add fused elementwise kernels, and the depthwise causal conv on Q/K/V is
      // a convolution, which on ROCm goes through MIOpen's Find/solver machinery.
      {"fusion", "MIOpen (and fused elementwise/norm kernels)",
       "deeper residual stack, more LayerNorms, SwiGLU/GELU, depthwise conv on Q/K/V",
       {"num_layers", "norm_layout", "qk_norm", "activation", "qkv_conv_kernel"},
       [](const TrainingConfig& c, const StressProfile& p) {
         TrainingConfig out = c;
         out.num_layers = std::max(c.num_layers, p.fusion.min_num_layers);
         out.norm_layout = "sandwich";
         out.qk_norm = true;
         out.activation = p.fusion.activation;
         out.qkv_conv_kernel = std::max(c.qkv_conv_kernel, p.fusion.qkv_conv_kernel);
         return out;
       }},
  };
}

const StressMode& find_mode(const std::string& name) {
  for (const auto& mode : stress_mode_registry())
    if (mode.name == name) return mode;
  throw ConfigError("unknown stress mode '" + name + "'");
}

}  // namespace

const std::vector<StressMode>& stress_mode_registry() {
  static const std::vector<StressMode> registry = make_registry();
  return registry;
}

std::vector<std::string> stress_mode_names() {
  std::vector<std::string> names;
  for (const auto& mode : stress_mode_registry()) names.push_back(mode.name);
  return names;
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
    if (name.empty())
      throw ConfigError("invalid --stress '" + text + "': empty mode name; known modes: " + known_text);
    if (name == "all") {
      wanted.insert(wanted.end(), known.begin(), known.end());
    } else if (std::find(known.begin(), known.end(), name) != known.end()) {
      wanted.push_back(name);
    } else {
      throw ConfigError("invalid --stress '" + text + "': unknown mode '" + name +
                        "'; known modes: " + known_text);
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

TrainingConfig compose_stress_modes(const TrainingConfig& base, const std::vector<std::string>& modes,
                                    const StressProfile& profile) {
  TrainingConfig cfg = base;
  for (const auto& name : modes) cfg = find_mode(name).apply(cfg, profile);
  return cfg;
}

nlohmann::json config_diff(const TrainingConfig& before, const TrainingConfig& after) {
  const nlohmann::json a = before, b = after;
  nlohmann::json diff = nlohmann::json::object();
  for (const auto& [field, value] : a.items())
    if (b.at(field) != value) diff[field] = {value, b.at(field)};
  return diff;
}

nlohmann::json explain_stress(const TrainingConfig& base, const std::vector<std::string>& modes,
                              const StressProfile& profile) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& name : modes) out[name] = config_diff(base, find_mode(name).apply(base, profile));
  return out;
}

}  // namespace rcl
