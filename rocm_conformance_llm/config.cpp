#include "rocm_conformance_llm/config.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "rocm_conformance_llm/utils/strings.hpp"

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

void require_min(int64_t value, int64_t lo, const std::string& field) {
  require(value >= lo, field, show(value), "must be >= " + show(lo));
}

void require_range(double value, double lo, double hi, bool hi_inclusive, const std::string& field) {
  const bool ok = std::isfinite(value) && value >= lo && (hi_inclusive ? value <= hi : value < hi);
  require(ok, field, show(value),
          "must be in [" + show(lo) + ", " + show(hi) + (hi_inclusive ? "]" : ")"));
}

void require_positive(double value, const std::string& field) {
  require(std::isfinite(value) && value > 0, field, show(value), "must be > 0");
}

void require_one_of(const std::string& value, const std::vector<std::string>& allowed,
                    const std::string& field) {
  const bool ok = std::find(allowed.begin(), allowed.end(), value) != allowed.end();
  require(ok, field, "'" + value + "'", "allowed: " + join(allowed));
}

// Presets. `smoke` finishes in seconds on 2 CPU cores; `small` and `large` are sized for one
// GPU (an MI250/MI300-class device for `large`). Stress intensities scale with the preset.
std::vector<Preset> make_presets() {
  std::vector<Preset> out;

  Preset smoke{"smoke", "CPU-sized: learns the synthetic corpus to near its loss floor in seconds (tests, CI)",
               {}, {}};
  {
    // Rotary positions and a high LR let 2 layers learn the copy spans within 300 steps.
    auto& t = smoke.training;
    t.hidden_size = 64;
    t.num_layers = 2;
    t.num_heads = 4;
    t.seq_len = 64;
    t.batch_size = 16;
    t.position = "rotary";
    t.learning_rate = 1e-2;
    t.steps = 300;
    t.warmup_steps = 10;
    t.eval_interval = 50;
    t.eval_batches = 4;
    auto& s = smoke.stress;
    s.gemm = {128, 4.0, "bf16"};
    s.rng = {0.1, 0.1, 50};
    s.comm = {8, 10};
    s.memory = {128, 2, 64 * MiB};
    s.fusion = {4, "swiglu", 3};
  }
  out.push_back(smoke);

  Preset cpu_medium{"cpu-medium", "A larger CPU model for benchmarks (minutes, not seconds)", {}, {}};
  {
    auto& t = cpu_medium.training;
    t.hidden_size = 256;
    t.num_layers = 4;
    t.num_heads = 8;
    t.seq_len = 128;
    t.batch_size = 8;
    t.steps = 40;
    t.learning_rate = 1e-3;
    cpu_medium.stress = smoke.stress;
    cpu_medium.stress.gemm.min_hidden_size = 512;
    cpu_medium.stress.memory.min_seq_len = 512;
    cpu_medium.stress.rng.replay_check_interval = 20;
    cpu_medium.stress.fusion.min_num_layers = 8;
  }
  out.push_back(cpu_medium);

  Preset small{"small", "One GPU, GPT-2-small shape (default when a GPU is present)", {}, {}};
  {
    auto& t = small.training;
    t.hidden_size = 768;
    t.num_layers = 12;
    t.num_heads = 12;
    t.seq_len = 1024;
    t.batch_size = 8;
    t.mixed_precision = "bf16";
    t.steps = 500;
    t.warmup_steps = 50;
    t.learning_rate = 6e-4;
    t.eval_interval = 100;
    t.eval_batches = 8;
    auto& s = small.stress;
    s.gemm = {2048, 4.0, "bf16"};
    s.rng = {0.1, 0.1, 50};
    s.comm = {2, 10};
    s.memory = {8192, 8, 0};
    s.fusion = {24, "swiglu", 3};
  }
  out.push_back(small);

  Preset large{"large", "MI300-class memory (192 GB): a 1.5B-parameter-class model", {}, {}};
  {
    auto& t = large.training;
    t.hidden_size = 2048;
    t.num_layers = 24;
    t.num_heads = 16;
    t.seq_len = 2048;
    t.batch_size = 8;
    t.mixed_precision = "bf16";
    t.steps = 1000;
    t.warmup_steps = 100;
    t.learning_rate = 3e-4;
    t.eval_interval = 200;
    t.eval_batches = 8;
    auto& s = large.stress;
    s.gemm = {4096, 4.0, "bf16"};
    s.rng = {0.1, 0.1, 100};
    s.comm = {2, 20};
    s.memory = {16384, 16, 8 * 1024 * MiB};
    s.fusion = {48, "swiglu", 3};
  }
  out.push_back(large);
  return out;
}

}  // namespace

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

void validate(const TrainingConfig& c) {
  require_min(c.hidden_size, 1, "hidden_size");
  require_min(c.num_heads, 1, "num_heads");
  require(c.hidden_size % c.num_heads == 0, "hidden_size", show(c.hidden_size),
          "must be divisible by num_heads=" + show(c.num_heads));
  require_min(c.num_layers, 1, "num_layers");
  require_positive(c.ffn_multiplier, "ffn_multiplier");
  require_range(c.dropout, 0.0, 1.0, false, "dropout");
  require_min(c.batch_size, 1, "batch_size");
  require_min(c.seq_len, 1, "seq_len");
  require_min(c.grad_accum_steps, 1, "grad_accum_steps");
  require_min(c.grad_sync_interval, 1, "grad_sync_interval");
  require(c.grad_sync_interval <= c.grad_accum_steps, "grad_sync_interval", show(c.grad_sync_interval),
          "must be <= grad_accum_steps=" + show(c.grad_accum_steps) +
              " (gradients are synchronised at least once per optimizer step)");
  require_one_of(c.mixed_precision, {"fp32", "bf16", "fp16"}, "mixed_precision");
  require_min(c.vocab_size, 0, "vocab_size");
  require_one_of(c.position, {"learned", "rotary"}, "position");
  require(c.position != "rotary" || (c.hidden_size / c.num_heads) % 2 == 0, "position", "'rotary'",
          "needs an even head dimension (hidden_size/num_heads=" + show(c.hidden_size / c.num_heads) + ")");
  require_one_of(c.norm, {"layernorm", "rmsnorm"}, "norm");
  require_one_of(c.norm_layout, {"pre", "sandwich"}, "norm_layout");
  require_one_of(c.activation, {"gelu", "swiglu"}, "activation");
  require_range(c.drop_path, 0.0, 1.0, false, "drop_path");
  require_min(c.qkv_conv_kernel, 0, "qkv_conv_kernel");
  require_one_of(c.attention_backend, {"math", "sdpa", "sdpa_math", "sdpa_flash", "sdpa_mem_efficient"},
                 "attention_backend");
  require_min(c.steps, 1, "steps");
  require(std::isfinite(c.max_duration_s) && c.max_duration_s >= 0, "max_duration_s",
          show(c.max_duration_s), "must be >= 0 (0 = no time limit)");
  require_positive(c.learning_rate, "learning_rate");
  require_range(c.min_lr_ratio, 0.0, 1.0, true, "min_lr_ratio");
  require_min(c.warmup_steps, 0, "warmup_steps");
  require_range(c.weight_decay, 0.0, 1.0, true, "weight_decay");
  require(std::isfinite(c.grad_clip) && c.grad_clip >= 0, "grad_clip", show(c.grad_clip),
          "must be >= 0 (0 = no clipping)");
  require_positive(c.fp16_initial_loss_scale, "fp16_initial_loss_scale");
  require_min(c.fp16_growth_interval, 1, "fp16_growth_interval");
  require_min(c.eval_interval, 0, "eval_interval");
  require_min(c.eval_batches, 1, "eval_batches");
  require_min(c.replay_check_interval, 0, "replay_check_interval");
  require_min(c.replay_steps, 1, "replay_steps");
  require_min(c.memory_pressure_bytes, 0, "memory_pressure_bytes");
  require_positive(c.bucket_mb, "bucket_mb");
  require_positive(c.collective_timeout_s, "collective_timeout_s");
  require_min(c.checksum_interval, 0, "checksum_interval");
  require_range(c.val_fraction, 0.0, 0.5, true, "val_fraction");
  require_one_of(c.device, {"auto", "cpu", "gpu"}, "device");
  require_min(c.num_threads, 0, "num_threads");
}

void validate(const StressProfile& p) {
  require_min(p.gemm.min_hidden_size, 1, "stress_profile.gemm.min_hidden_size");
  require_positive(p.gemm.min_ffn_multiplier, "stress_profile.gemm.min_ffn_multiplier");
  require_one_of(p.gemm.precision, {"bf16", "fp16"}, "stress_profile.gemm.precision");
  require_range(p.rng.min_dropout, 0.0, 1.0, false, "stress_profile.rng.min_dropout");
  require_range(p.rng.min_drop_path, 0.0, 1.0, false, "stress_profile.rng.min_drop_path");
  require_min(p.rng.replay_check_interval, 1, "stress_profile.rng.replay_check_interval");
  require_min(p.comm.max_batch_size, 1, "stress_profile.comm.max_batch_size");
  require_min(p.comm.max_checksum_interval, 1, "stress_profile.comm.max_checksum_interval");
  require_min(p.memory.min_seq_len, 1, "stress_profile.memory.min_seq_len");
  require_min(p.memory.min_grad_accum_steps, 1, "stress_profile.memory.min_grad_accum_steps");
  require_min(p.memory.memory_pressure_bytes, 0, "stress_profile.memory.memory_pressure_bytes");
  require_min(p.fusion.min_num_layers, 1, "stress_profile.fusion.min_num_layers");
  require_one_of(p.fusion.activation, {"gelu", "swiglu"}, "stress_profile.fusion.activation");
  require_min(p.fusion.qkv_conv_kernel, 0, "stress_profile.fusion.qkv_conv_kernel");
}

void validate(const DiagnosticsConfig& d) {
  require_min(d.warmup_steps, 0, "diagnostics.warmup_steps");
  require_positive(d.loss_spike_zscore, "diagnostics.loss_spike_zscore");
  require_positive(d.step_time_cv_warn, "diagnostics.step_time_cv_warn");
  require(d.slowdown_ratio_warn > 1.0, "diagnostics.slowdown_ratio_warn", show(d.slowdown_ratio_warn),
          "must be > 1");
  require(d.first_step_ratio_warn > 1.0, "diagnostics.first_step_ratio_warn",
          show(d.first_step_ratio_warn), "must be > 1");
  require_positive(d.memory_slope_bytes_per_step_warn, "diagnostics.memory_slope_bytes_per_step_warn");
  require_range(d.fragmentation_ratio_warn, 0.0, 1.0, false, "diagnostics.fragmentation_ratio_warn");
  require_min(d.gemm_canary_interval, 0, "diagnostics.gemm_canary_interval");
  require_positive(d.collective_latency_zscore, "diagnostics.collective_latency_zscore");
  require_positive(d.watchdog_timeout_s, "diagnostics.watchdog_timeout_s");
  require_min(d.window_steps, 3, "diagnostics.window_steps");
  require_range(d.replay_rel_tolerance, 0.0, 1.0, true, "diagnostics.replay_rel_tolerance");
  require(std::isfinite(d.reload_memory_growth_warn_bytes) && d.reload_memory_growth_warn_bytes >= 0,
          "diagnostics.reload_memory_growth_warn_bytes", show(d.reload_memory_growth_warn_bytes), "must be >= 0");
  require_range(d.baseline_loss_rel_tolerance, 0.0, 1.0, true, "diagnostics.baseline_loss_rel_tolerance");
  require(std::isfinite(d.baseline_memory_growth_ratio) && d.baseline_memory_growth_ratio >= 0,
          "diagnostics.baseline_memory_growth_ratio", show(d.baseline_memory_growth_ratio), "must be >= 0");
  require_min(d.fingerprint_interval, 0, "diagnostics.fingerprint_interval");
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
    const bool same_kind = (slot.is_number() && value.is_number()) ||
                           (slot.is_boolean() && value.is_boolean()) ||
                           (slot.is_string() && value.is_string());
    if (!same_kind)
      throw ConfigError("invalid " + path + "=" + value.dump() + ": expected a " + slot.type_name());
    if (slot.is_number_integer() && !value.is_number_integer())
      throw ConfigError("invalid " + path + "=" + value.dump() + ": expected an integer");
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
