// Run configuration: the training config the stress modes mutate, the stress intensities,
// the detector thresholds, presets, JSON (de)serialisation and validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/errors.hpp"

namespace rcl {

// The spec's ten fields first, then what the stress modes and the loop need.
struct TrainingConfig {
  // --- the spec's TrainingConfig ---
  int64_t hidden_size = 128;
  int64_t num_layers = 2;
  double ffn_multiplier = 4.0;
  double dropout = 0.0;           // on embeddings, attention probabilities and residual branches
  int64_t batch_size = 8;         // per rank, per micro-step
  int64_t seq_len = 64;
  int64_t grad_accum_steps = 1;   // micro-steps per optimizer step
  int64_t grad_sync_interval = 1; // micro-steps between gradient all-reduces (<= grad_accum_steps)
  bool activation_checkpointing = false;
  std::string mixed_precision = "fp32";  // fp32 | bf16 | fp16

  // --- model shape and knobs ---
  int64_t num_heads = 4;
  int64_t vocab_size = 0;                 // 0: taken from the data source
  std::string position = "learned";       // learned | rotary
  std::string norm = "layernorm";         // layernorm | rmsnorm
  std::string norm_layout = "pre";        // pre | sandwich (pre + post norm on each branch)
  bool qk_norm = false;                   // normalise Q and K per head
  std::string activation = "gelu";        // gelu | swiglu
  double drop_path = 0.0;                 // stochastic depth rate (last block), linear in depth
  int64_t qkv_conv_kernel = 0;            // Primer depthwise causal conv after Q/K/V (0 = off)
  std::string attention_backend = "math"; // math | sdpa | sdpa_math | sdpa_flash | sdpa_mem_efficient

  // --- optimisation ---
  int64_t steps = 60;
  double max_duration_s = 0.0;  // stop after this many seconds (0 = only `steps` bounds the run)
  double learning_rate = 3e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 10;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double fp16_initial_loss_scale = 65536.0;
  int64_t fp16_growth_interval = 200;

  // --- evaluation ---
  int64_t eval_interval = 20;  // steps between validation losses (0 = off)
  int64_t eval_batches = 4;

  // --- reproducibility and rng-mode checks ---
  uint64_t seed = 1234;
  bool deterministic = false;         // at::globalContext().setDeterministicAlgorithms
  int64_t replay_check_interval = 0;  // steps between rewind-and-replay checks (0 = off)
  int64_t replay_steps = 2;           // steps re-run by each replay check

  // --- memory mode ---
  int64_t memory_pressure_bytes = 0;  // ballast held on the device for the whole run

  // --- comm mode and distributed ---
  bool log_per_rank = false;
  double bucket_mb = 25.0;            // gradient all-reduce bucket size
  double collective_timeout_s = 120;  // every collective; PyTorch's default is 600
  int64_t checksum_interval = 10;     // steps between cross-rank parameter checksums (0 = off)

  // --- data ---
  std::string data_path;              // empty: the embedded synthetic corpus
  double val_fraction = 0.05;

  // --- execution ---
  std::string device = "auto";        // auto | cpu | gpu
  int64_t num_threads = 0;            // intra-op CPU threads (0 = all cores)
  bool phase_timing = false;          // per-phase timing (data/forward/backward/grad_sync/optimizer)

  bool operator==(const TrainingConfig&) const = default;
};

// Intensities of each stress mode: what "more" means for this preset.
struct GemmStress {
  int64_t min_hidden_size = 256;
  double min_ffn_multiplier = 4.0;
  std::string precision = "bf16";     // used when the base is fp32
  bool operator==(const GemmStress&) const = default;
};
struct RngStress {
  double min_dropout = 0.1;
  double min_drop_path = 0.1;
  int64_t replay_check_interval = 20; // upper bound: checks at least this often
  bool operator==(const RngStress&) const = default;
};
struct CommStress {
  int64_t max_batch_size = 4;
  int64_t max_checksum_interval = 5;
  bool operator==(const CommStress&) const = default;
};
struct MemoryStress {
  int64_t min_seq_len = 8192;
  int64_t min_grad_accum_steps = 4;
  int64_t memory_pressure_bytes = 0;  // 0: no artificial pressure
  bool operator==(const MemoryStress&) const = default;
};
struct FusionStress {
  int64_t min_num_layers = 24;
  std::string activation = "swiglu";
  int64_t qkv_conv_kernel = 3;
  bool operator==(const FusionStress&) const = default;
};
struct StressProfile {
  GemmStress gemm;
  RngStress rng;
  CommStress comm;
  MemoryStress memory;
  FusionStress fusion;
  bool operator==(const StressProfile&) const = default;
};

// Detector thresholds and intervals; severities and defaults are documented in README.
struct DiagnosticsConfig {
  bool enabled = true;
  int64_t warmup_steps = 5;            // steps excluded from timing baselines
  double loss_spike_zscore = 6.0;      // robust z of loss vs running median/MAD
  double step_time_cv_warn = 0.5;      // coefficient of variation of steady-state step time
  double slowdown_ratio_warn = 1.5;    // late window median / post-warm-up median
  double first_step_ratio_warn = 50.0; // first step / steady-state median
  double memory_slope_bytes_per_step_warn = 1 << 20;
  double fragmentation_ratio_warn = 0.5;  // (reserved - allocated) / reserved
  int64_t gemm_canary_interval = 100;  // steps between GEMM shape canaries (0 = off)
  double collective_latency_zscore = 8.0;
  double watchdog_timeout_s = 300;     // no step finished within this: hang
  int64_t window_steps = 10;           // steps in each timing/memory/latency baseline window
  double replay_rel_tolerance = 1e-4;  // replayed vs original loss when not deterministic
  double reload_memory_growth_warn_bytes = 64 << 20;  // memory kept after a checkpoint reload
  double baseline_loss_rel_tolerance = 1e-2;   // --baseline loss compare when not deterministic
  double baseline_memory_growth_ratio = 0.10;  // --baseline peak memory growth
  int64_t fingerprint_interval = 50;   // steps between ATen op-count fingerprints (0 = off)
  bool operator==(const DiagnosticsConfig&) const = default;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    TrainingConfig, hidden_size, num_layers, ffn_multiplier, dropout, batch_size, seq_len,
    grad_accum_steps, grad_sync_interval, activation_checkpointing, mixed_precision, num_heads,
    vocab_size, position, norm, norm_layout, qk_norm, activation, drop_path, qkv_conv_kernel,
    attention_backend, steps, max_duration_s, learning_rate, min_lr_ratio, warmup_steps,
    weight_decay, grad_clip, fp16_initial_loss_scale, fp16_growth_interval, eval_interval,
    eval_batches, seed, deterministic, replay_check_interval, replay_steps,
    memory_pressure_bytes, log_per_rank, bucket_mb, collective_timeout_s, checksum_interval,
    data_path, val_fraction, device, num_threads, phase_timing)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GemmStress, min_hidden_size, min_ffn_multiplier,
                                                precision)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RngStress, min_dropout, min_drop_path,
                                                replay_check_interval)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CommStress, max_batch_size, max_checksum_interval)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MemoryStress, min_seq_len, min_grad_accum_steps,
                                                memory_pressure_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FusionStress, min_num_layers, activation,
                                                qkv_conv_kernel)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StressProfile, gemm, rng, comm, memory, fusion)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    DiagnosticsConfig, enabled, warmup_steps, loss_spike_zscore, step_time_cv_warn,
    slowdown_ratio_warn, first_step_ratio_warn, memory_slope_bytes_per_step_warn,
    fragmentation_ratio_warn, gemm_canary_interval, collective_latency_zscore, watchdog_timeout_s,
    window_steps, replay_rel_tolerance, reload_memory_growth_warn_bytes,
    baseline_loss_rel_tolerance, baseline_memory_growth_ratio, fingerprint_interval)

// A preset: a base training config and the stress intensities that fit its scale.
struct Preset {
  std::string name;
  std::string description;
  TrainingConfig training;
  StressProfile stress;
};

const std::vector<Preset>& presets();
const Preset& find_preset(const std::string& name);  // ConfigError listing known names
// `smoke` on CPU; `small` when a GPU is present.
std::string default_preset_name(bool gpu_present);

// Throws ConfigError naming the first invalid field or combination and what is allowed.
void validate(const TrainingConfig& cfg);
void validate(const StressProfile& profile);
void validate(const DiagnosticsConfig& diag);

// Overlay `patch` onto `target` (a JSON object of the same shape): only keys present in
// `patch` change; unknown keys and wrong types are ConfigErrors naming the key.
void merge_json_strict(nlohmann::json& target, const nlohmann::json& patch,
                       const std::string& where);

// `key=value` override into a JSON object, e.g. "hidden_size=512" or "stress_profile.memory.min_seq_len=2048"
// against {"training":..., "stress_profile":..., "diagnostics":...}; bare keys mean training.
void apply_override(nlohmann::json& doc, const std::string& assignment);

}  // namespace rcl
