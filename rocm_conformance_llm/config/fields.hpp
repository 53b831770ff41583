// The config sections' field tables and the structs they generate: each struct is generated from
// one field table (an X-macro: every member is in it), and that table drives JSON to/from, the
// per-field checks of validate() and `--help-config`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config/enums.hpp"

namespace rcl {

// A per-field check: what validate() enforces and `--help-config` prints as allowed values.
struct FieldCheck {
  enum Kind { kAny, kAtLeast, kAbove, kRange, kOneOf };
  Kind kind = kAny;
  double lo = 0;
  double hi = 0;
  bool hi_inclusive = false;
  std::string note{};                  // kAtLeast: said after the bound, e.g. "0 = off"
  std::vector<std::string> allowed{};  // kOneOf
};
FieldCheck unchecked();
FieldCheck at_least(double lo, std::string note = "");
FieldCheck above(double lo);
FieldCheck within(double lo, double hi, bool hi_inclusive);
FieldCheck one_of(std::vector<std::string> allowed);
template <NamedEnum E>
FieldCheck one_of_names() {
  return one_of(names_of<E>());
}

// One key of a config section: its name, default (which also fixes its JSON type), check and
// one-line meaning. Stress intensities are declared the same way, in the stress mode registry.
struct ConfigField {
  std::string name;
  nlohmann::json default_value;
  FieldCheck check;
  std::string meaning;
};

// X(type, member, default, check, meaning). The spec's ten fields first, then what the stress
// modes and the loop need.
#define RCL_TRAINING_FIELDS(X)                                                                                         \
  /* --- the spec's TrainingConfig --- */                                                                              \
  X(int64_t, hidden_size, 128, at_least(1), "model width (divisible by num_heads)")                                    \
  X(int64_t, num_layers, 2, at_least(1), "decoder blocks")                                                             \
  X(double, ffn_multiplier, 4.0, above(0), "MLP width / hidden_size")                                                  \
  X(double, dropout, 0.0, within(0, 1, false), "dropout on embeddings, attention probabilities and residual branches") \
  X(int64_t, batch_size, 8, at_least(1), "sequences per rank, per micro-step")                                         \
  X(int64_t, seq_len, 64, at_least(1), "tokens per sequence")                                                          \
  X(int64_t, grad_accum_steps, 1, at_least(1), "micro-steps per optimizer step")                                       \
  X(int64_t, grad_sync_interval, 1, at_least(1), "micro-steps between gradient all-reduces (<= grad_accum_steps)")     \
  X(bool, activation_checkpointing, false, unchecked(), "recompute block activations in backward")                     \
  X(Precision, mixed_precision, Precision::fp32, one_of_names<Precision>(), "autocast precision")                      \
  /* --- model shape and knobs --- */                                                                                  \
  X(int64_t, num_heads, 4, at_least(1), "attention heads")                                                             \
  X(int64_t, num_key_value_heads, 0, at_least(0, "0 = num_heads"),                                                     \
    "key/value heads: fewer than num_heads is grouped-query attention (must divide num_heads)")                        \
  X(int64_t, vocab_size, 0, at_least(0), "vocabulary size (0: taken from the data source)")                            \
  X(PositionEncoding, position, PositionEncoding::learned, one_of_names<PositionEncoding>(), "position encoding")      \
  X(NormKind, norm, NormKind::layernorm, one_of_names<NormKind>(), "normalisation")                                    \
  X(NormLayout, norm_layout, NormLayout::pre, one_of_names<NormLayout>(),                                              \
    "pre-norm, or sandwich (pre + post norm on each branch)")                                                          \
  X(bool, qk_norm, false, unchecked(), "normalise Q and K per head")                                                   \
  X(Activation, activation, Activation::gelu, one_of_names<Activation>(), "MLP activation")                            \
  X(double, drop_path, 0.0, within(0, 1, false), "stochastic depth rate (last block), linear in depth")                \
  X(int64_t, qkv_conv_kernel, 0, at_least(0), "Primer depthwise causal conv after Q/K/V (0 = off)")                    \
  /* GPT-2's 0.02 by default; the gemm mode lowers it as it widens the model (docs/stress-modes.md) */                 \
  X(double, init_std, 0.02, above(0),                                                                                  \
    "standard deviation of the initial weights (residual projections also / sqrt(2 num_layers))")                      \
  X(AttentionBackend, attention_backend, AttentionBackend::automatic, one_of_names<AttentionBackend>(),                \
    "attention kernel (auto: sdpa with libtorch >= 2.0 on a GPU, and on a CPU in fp32 without dropout; else math)")                    \
  /* --- attention mode --- */                                                                                         \
  X(double, attention_pad_fraction, 0.0, within(0, 1, false),                                                          \
    "tail share of every second sequence masked as padding (a padded batch's attention mask)")                         \
  X(bool, attention_noncontiguous_v, false, unchecked(), "V reaches the kernel as a strided (non-contiguous) view")    \
  X(int64_t, attention_probe_interval, 0, at_least(0),                                                                 \
    "steps between attention parity probes, also run at start-up (0 = off)")                                           \
  X(int64_t, attention_probe_seq_len, 0, at_least(0), "sequence length of the probe (0: seq_len)")                     \
  /* --- optimisation --- */                                                                                           \
  X(int64_t, steps, 60, at_least(1), "optimizer steps")                                                                \
  X(double, max_duration_s, 0.0, at_least(0, "0 = no time limit"),                                                     \
    "stop after this many seconds (0 = only steps bounds the run)")                                                    \
  X(double, learning_rate, 3e-3, above(0), "peak learning rate")                                                       \
  X(double, min_lr_ratio, 0.1, within(0, 1, true), "final learning rate / peak (cosine decay)")                        \
  X(int64_t, warmup_steps, 10, at_least(0), "linear learning-rate warm-up steps")                                      \
  X(double, weight_decay, 0.1, within(0, 1, true), "AdamW weight decay")                                               \
  X(double, grad_clip, 1.0, at_least(0, "0 = no clipping"), "gradient norm clip")                                      \
  X(double, fp16_initial_loss_scale, 65536.0, above(0), "fp16 dynamic loss scale at start")                            \
  X(int64_t, fp16_growth_interval, 200, at_least(1), "fp16 steps without overflow before the scale grows")             \
  /* --- evaluation --- */                                                                                             \
  X(int64_t, eval_interval, 20, at_least(0), "steps between validation losses (0 = off)")                              \
  X(int64_t, eval_batches, 4, at_least(1), "batches per validation loss")                                              \
  /* --- reproducibility and rng-mode checks --- */                                                                    \
  X(uint64_t, seed, 1234, unchecked(), "seed for init, data order and dropout")                                        \
  X(bool, deterministic, false, unchecked(),                                                                           \
    "at::globalContext().setDeterministicAlgorithms for every step (true means determinism=all)")                      \
  X(Determinism, determinism, Determinism::off, one_of_names<Determinism>(),                                           \
    "deterministic algorithms: off; replay (only around the steps a replay check compares); all steps")                \
  X(int64_t, replay_check_interval, 0, at_least(0), "steps between rewind-and-replay checks (0 = off)")                \
  X(int64_t, replay_steps, 2, at_least(1), "steps re-run by each replay check")                                        \
  X(ReplaySnapshot, replay_snapshot, ReplaySnapshot::host, one_of_names<ReplaySnapshot>(),                             \
    "where a replay check keeps its saved state: host memory; disk (the checkpoint writer and loader, every check)")    \
  /* --- memory mode --- */                                                                                            \
  X(int64_t, memory_pressure_bytes, 0, at_least(0), "ballast held on the device for the whole run")                    \
  X(bool, checkpoint_keep_attention, true, unchecked(),                                                                \
    "with activation_checkpointing: keep each block's attention kernel output (and what its backward reads) and "      \
    "recompute only the rest; false: recompute the whole block. A GPU fit turns it off before lowering batch_size")    \
  /* --- comm mode and distributed --- */                                                                              \
  X(bool, log_per_rank, false, unchecked(), "every rank logs, not only rank 0")                                        \
  X(double, bucket_mb, 25.0, above(0), "gradient all-reduce bucket size (MB)")                                         \
  X(DataParallel, data_parallel, DataParallel::ddp, one_of_names<DataParallel>(),                                      \
    "data parallelism, ordered by what it shards: ddp (nothing) < zero (optimizer state, gradients) < fsdp "           \
    "(parameters too, per block; not with tensor_parallel_degree > 1 or moe_experts); no effect on one rank")          \
  X(double, collective_timeout_s, 120.0, above(0), "timeout of every collective (PyTorch's default is 600)")           \
  X(int64_t, checksum_interval, 10, at_least(0), "steps between cross-rank parameter checksums (0 = off)")             \
  X(int64_t, collective_check_interval, 0, at_least(0),                                                                \
    "steps between exact batteries of every collective kind, also run before step 1 (0 = off)")                        \
  X(double, collective_check_max_mb, 1.0, above(0), "largest battery message (MiB); sizes 0.03/1/3/12 up to it")       \
  /* --- model parallelism (docs/distributed.md, "Tensor and expert parallelism") --- */                               \
  X(int64_t, tensor_parallel_degree, 1, at_least(1),                                                                   \
    "ranks per tensor-parallel group (Megatron: heads and MLP columns split); fitted to what the world and the heads " \
    "allow")                                                                                                           \
  X(bool, sequence_parallel, false, unchecked(),                                                                       \
    "with tensor parallelism, activations between blocks split along the sequence")                                    \
  X(int64_t, moe_experts, 0, at_least(0, "0 = dense MLP"),                                                             \
    "mixture-of-experts feed-forward: experts, sharded over the data-parallel ranks")                                  \
  X(int64_t, moe_top_k, 2, at_least(1), "experts each token is routed to (<= moe_experts)")                            \
  X(int64_t, distributed_tensor_parallel_degree, 1, at_least(1),                                                       \
    "tensor_parallel_degree used only where tensor_parallel_degree is 1 and the world keeps two or more "              \
    "data-parallel ranks beside it (a world of two stays data-parallel)")                                              \
  X(int64_t, distributed_moe_experts, 0, at_least(0, "0 = off"),                                                       \
    "experts in place of the dense MLP only where moe_experts is 0 and several data-parallel ranks can shard them (a " \
    "world of one keeps its model)")                                                                                   \
  /* --- data --- */                                                                                                   \
  X(std::string, data_path, "", unchecked(),                                                                           \
    "text or JSONL file, an indexed dataset PREFIX, or a blend \"W1 PREFIX1 W2 PREFIX2 ...\" (empty: the synthetic "   \
    "corpus)")                                                                                                         \
  X(double, val_fraction, 0.05, within(0, 0.5, true), "share of the data held out for validation")                     \
  /* --- execution --- */                                                                                              \
  X(DeviceChoice, device, DeviceChoice::automatic, one_of_names<DeviceChoice>(), "where to run")                       \
  X(int64_t, num_threads, 0, at_least(0), "intra-op CPU threads (0 = all cores)")                                      \
  X(bool, phase_timing, false, unchecked(), "per-phase timing (data/forward/backward/grad_sync/optimizer)")

// Detector thresholds and intervals; the signatures each governs: docs/detectors.md.
#define RCL_DIAGNOSTICS_FIELDS(X)                                                                                    \
  X(bool, enabled, true, unchecked(), "run the detectors and active checks")                                         \
  X(int64_t, warmup_steps, 5, at_least(0), "steps excluded from timing baselines")                                   \
  X(double, loss_spike_zscore, 6.0, above(0), "robust z of loss vs running median/MAD")                              \
  X(double, loss_spike_min_jump, 0.5, above(0), "a loss spike is also this relative jump over the median")           \
  /* A fresh model's loss starts near ln(vocab_size): the H200's --stress all on small at */                         \
  /* 11.23 against ln 50257 = 10.82, then 16.11 at step 2. 2 nats over the first loss makes the */                   \
  /* true token 7x less likely than at the start; 3 over ln(V) leaves room for a wide init's larger */               \
  /* logits (a spread s starts s^2/2 nats above). No clean run comes near either (docs/detectors.md). */             \
  X(double, loss_sanity_first_step_margin, 2.0, above(0),                                                            \
    "until the loss-spike test has a baseline, a loss this many nats above the first step's warns")                  \
  X(double, loss_sanity_vocab_margin, 3.0, above(0),                                                                 \
    "until the loss-spike test has a baseline, a loss this many nats above ln(vocab_size) warns")                    \
  X(double, false_alarm_budget, 1e-3, above(0),                                                                      \
    "per-run false-alarm probability a statistical detector may spend (raises z over long runs)")                    \
  X(double, step_time_cv_warn, 0.5, above(0), "coefficient of variation of steady-state step time")                  \
  X(double, slowdown_ratio_warn, 1.5, above(1), "late window median / post-warm-up median")                          \
  X(double, first_step_ratio_warn, 50.0, above(1), "first step / steady-state median")                               \
  X(double, first_step_excess_warn_s, 5.0, at_least(0),                                                              \
    "a slow first step warns only when it also costs this many seconds more than a steady one")                      \
  X(double, memory_slope_bytes_per_step_warn, 1 << 20, above(0), "memory growth per step that warns")                \
  X(double, fragmentation_ratio_warn, 0.5, within(0, 1, false), "(reserved - allocated) / reserved")                 \
  X(int64_t, gemm_canary_interval, 100, at_least(0), "steps between GEMM shape canaries (0 = off)")                  \
  X(int64_t, shadow_check_interval, 1, at_least(0),                                                                  \
    "steps between shadow checks of one of the step's own GEMMs in float64 (0 = off)")                               \
  X(GemmChecksums, gemm_checksums, GemmChecksums::rotating, one_of_names<GemmChecksums>(),                           \
    "row and column checksums of the step's GEMMs, forward and backward: all (each call in its step), rotating "      \
    "(gemm_checksums_per_step distinct GEMMs a step, in turn), off")                                                 \
  X(int64_t, gemm_checksums_per_step, 4, at_least(1), "distinct GEMMs checked a step when gemm_checksums is rotating") \
  X(double, collective_latency_zscore, 8.0, above(0), "robust z of a collective's latency")                          \
  X(double, collective_latency_min_step_fraction, 0.25, above(0),                                                    \
    "a latency spike's extra time, as a share of the median step time")                                              \
  X(double, collective_slow_ratio, 4.0, above(1),                                                                    \
    "a battery collective this many times its own median latency (same kind, op, dtype, size) is slow")              \
  X(double, collective_slow_min_extra_s, 0.01, above(0),                                                             \
    "a slow battery collective also takes this much longer than its median (CPU ranks: at least 0.2)")               \
  X(double, watchdog_timeout_s, 300.0, above(0), "no step finished within this: hang")                               \
  X(int64_t, window_steps, 10, at_least(3), "steps in each timing/memory/latency baseline window")                   \
  X(double, replay_rel_tolerance, 1e-4, within(0, 1, true), "replayed vs original loss when not deterministic")      \
  X(double, reload_memory_growth_warn_bytes, 64 << 20, at_least(0), "memory kept after a checkpoint reload")         \
  X(double, baseline_loss_rel_tolerance, 1e-2, within(0, 1, true), "--baseline loss compare when not deterministic") \
  X(double, baseline_memory_growth_ratio, 0.10, at_least(0), "--baseline peak memory growth")                        \
  X(int64_t, fingerprint_interval, 50, at_least(0), "steps between ATen op-count fingerprints (0 = off)")            \
  X(bool, count_host_reads, false, unchecked(),                                                                      \
    "count blocking device-to-host reads per step into metrics.jsonl's host_reads (a RecordFunction callback)")      \
  X(double, telemetry_interval_s, 5.0, at_least(0, "0 = off"),                                                       \
    "seconds between ROCm SMI samples into telemetry.jsonl (docs/telemetry.md)")                                     \
  X(std::string, kernel_log_source, "auto", unchecked(),                                                             \
    "amdgpu kernel log: auto (/dev/kmsg, else dmesg), off, or a recorded log file read whole")                       \
  X(bool, memory_profile, false, unchecked(),                                                                        \
    "memory after model creation, on the device, after step 1 and at peak, in report.json")                          \
  X(int64_t, prom_interval, 10, at_least(0, "0 = only the final one"),                                               \
    "steps between rewrites of metrics.prom (Prometheus textfile)")                                                  \
  X(double, summary_interval_s, 300.0, at_least(0, "0 = off"),                                                       \
    "seconds between soak summary lines on the console: tokens/s over the interval, findings, memory trend, ETA")

// ROCm knobs: each sets an environment variable libtorch or a ROCm library reads when it
// initialises ("default" / "" / 0 leaves the variable as the environment has it). Which variable,
// and when it is set: platform/rocm_knobs.hpp and docs/configuration.md.
#define RCL_ROCM_FIELDS(X)                                                                                        \
  X(BlasBackend, blas_backend, BlasBackend::keep, one_of_names<BlasBackend>(),                                    \
    "GEMM backend preference (TORCH_BLAS_PREFER_HIPBLASLT)")                                                      \
  X(KnobSwitch, tunableop, KnobSwitch::keep, one_of_names<KnobSwitch>(), "TunableOp (PYTORCH_TUNABLEOP_ENABLED)") \
  X(std::string, tunableop_results_file, "", unchecked(), "TunableOp results file (PYTORCH_TUNABLEOP_FILENAME)")  \
  X(MiopenFindMode, miopen_find_mode, MiopenFindMode::keep, one_of_names<MiopenFindMode>(),                       \
    "MIOpen kernel search (MIOPEN_FIND_MODE)")                                                                    \
  X(std::string, miopen_user_db, "", unchecked(),                                                                 \
    "MIOPEN_USER_DB_PATH: a path, or per-run (OUTPUT_DIR/miopen-user-db)")                                        \
  X(KnobBool, expandable_segments, KnobBool::keep, one_of_names<KnobBool>(),                                      \
    "allocator expandable_segments (PYTORCH_HIP_ALLOC_CONF)")                                                     \
  X(int64_t, max_split_size_mb, 0, at_least(0, "0 = libtorch's default"),                                         \
    "allocator max_split_size_mb (PYTORCH_HIP_ALLOC_CONF)")                                                       \
  X(double, garbage_collection_threshold, 0.0, within(0, 1, false),                                               \
    "allocator garbage_collection_threshold, 0 = off (PYTORCH_HIP_ALLOC_CONF)")                                   \
  X(KnobSwitch, hsa_enable_sdma, KnobSwitch::keep, one_of_names<KnobSwitch>(), "SDMA copy engines (HSA_ENABLE_SDMA)")

#define RCL_DECLARE_MEMBER(type, member, default_value, check, meaning) type member = default_value;

struct TrainingConfig {
  RCL_TRAINING_FIELDS(RCL_DECLARE_MEMBER)
  bool operator==(const TrainingConfig&) const = default;
};

struct DiagnosticsConfig {
  RCL_DIAGNOSTICS_FIELDS(RCL_DECLARE_MEMBER)
  bool operator==(const DiagnosticsConfig&) const = default;
};

struct RocmConfig {
  RCL_ROCM_FIELDS(RCL_DECLARE_MEMBER)
  bool operator==(const RocmConfig&) const = default;
};

#undef RCL_DECLARE_MEMBER

// The table's name of a TrainingConfig member (`&TrainingConfig::seq_len` -> "seq_len").
template <typename T>
constexpr std::string_view training_field_name(T TrainingConfig::*member) {
#define RCL_NAME_IF_MEMBER(type, field, default_value, check, meaning) \
  if constexpr (std::is_same_v<T, type>)                               \
    if (member == &TrainingConfig::field) return #field;
  RCL_TRAINING_FIELDS(RCL_NAME_IF_MEMBER)
#undef RCL_NAME_IF_MEMBER
  return {};  // not reached: every member is in the table
}

// A TrainingConfig field named through a pointer to it: the stress rules name their fields this
// way, so a misspelt or removed field is a compile error, not a rule that fails when a run
// composes it. The rule keeps the table's name.
class TrainingField {
 public:
  template <typename T>
  consteval TrainingField(T TrainingConfig::*member) : name_(training_field_name(member)) {}  // NOLINT: implicit
  operator std::string() const { return std::string(name_); }                                  // NOLINT: implicit

 private:
  std::string_view name_;
};

// Key/value heads of cfg's attention: num_key_value_heads, or num_heads when it is 0.
int64_t key_value_heads(const TrainingConfig& cfg);

// Deterministic algorithms: `determinism`, raised to all by the stable bool `deterministic`
// (true means all).
Determinism determinism_of(const TrainingConfig& cfg);

// The field tables, in declaration order.
const std::vector<ConfigField>& training_fields();
const std::vector<ConfigField>& diagnostics_fields();
const std::vector<ConfigField>& rocm_fields();

// Keys missing from the JSON keep their defaults.
void to_json(nlohmann::json& j, const TrainingConfig& c);
void from_json(const nlohmann::json& j, TrainingConfig& c);
void to_json(nlohmann::json& j, const DiagnosticsConfig& d);
void from_json(const nlohmann::json& j, DiagnosticsConfig& d);
void to_json(nlohmann::json& j, const RocmConfig& r);
void from_json(const nlohmann::json& j, RocmConfig& r);

}  // namespace rcl
