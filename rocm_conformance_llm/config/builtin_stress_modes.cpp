// The built-in stress modes as data (config/builtin_stress_modes.hpp).
#include "rocm_conformance_llm/config/builtin_stress_modes.hpp"

#include "rocm_conformance_llm/base/finding.hpp"

namespace rcl {

std::vector<StressMode> builtin_stress_modes() {
  using Cfg = TrainingConfig;  // the rules name their fields by pointer (TrainingField)
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
       .rules = {raise_count_to_share_at_most(&Cfg::num_heads, intensity("max_head_dim"), &Cfg::hidden_size,
                                              "min_hidden_size", &Cfg::num_key_value_heads),
                 inversely_scaling(
                     raise_to_multiple(&Cfg::hidden_size, intensity("min_hidden_size"), &Cfg::num_heads, 8),
                     {{&Cfg::learning_rate, "learning_rate_width_exponent"},
                      {&Cfg::init_std, "init_std_width_exponent"}}),
                 raise_to(&Cfg::ffn_multiplier, intensity("min_ffn_multiplier")),
                 replace(&Cfg::mixed_precision, "fp32", intensity("precision"))}},
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
       .rules = {raise_to(&Cfg::dropout, intensity("min_dropout")),
                 raise_to(&Cfg::drop_path, intensity("min_drop_path")), raise_to(&Cfg::determinism, fixed("replay")),
                 at_least_every(&Cfg::replay_check_interval, intensity("replay_check_interval"))}},
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
       .rules = {lower_to(&Cfg::batch_size, intensity("max_batch_size")), lower_to(&Cfg::grad_sync_interval, fixed(1)),
                 switch_on(&Cfg::log_per_rank), raise_to(&Cfg::data_parallel, fixed("zero")),
                 raise_to(&Cfg::distributed_tensor_parallel_degree,
                          intensity("min_distributed_tensor_parallel_degree")),
                 raise_to(&Cfg::distributed_moe_experts, intensity("min_distributed_moe_experts")),
                 at_least_every(&Cfg::checksum_interval, intensity("max_checksum_interval")),
                 at_least_every(&Cfg::collective_check_interval, intensity("max_collective_check_interval")),
                 raise_to(&Cfg::collective_check_max_mb, intensity("min_collective_message_mb"))}},
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
       .rules = {raise_to(&Cfg::seq_len, intensity("min_seq_len")),
                 only_where({.torch_major = 2, .gpu = true}, replace(&Cfg::attention_backend, "math", fixed("sdpa"))),
                 switch_on(&Cfg::activation_checkpointing),
                 raise_to(&Cfg::grad_accum_steps, intensity("min_grad_accum_steps")),
                 raise_to(&Cfg::memory_pressure_bytes, intensity("memory_pressure_bytes"))}},
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
       .rules = {raise_to(&Cfg::num_layers, intensity("min_num_layers")), set_to(&Cfg::norm_layout, fixed("sandwich")),
                 switch_on(&Cfg::qk_norm), set_to(&Cfg::activation, intensity("activation")),
                 raise_to(&Cfg::qkv_conv_kernel, intensity("qkv_conv_kernel"))}},
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
       .rules = {replace(&Cfg::attention_backend, "math", fixed("sdpa")),
                 raise_to(&Cfg::attention_pad_fraction, intensity("pad_fraction")),
                 switch_on(&Cfg::attention_noncontiguous_v),
                 at_least_every(&Cfg::attention_probe_interval, intensity("probe_interval")),
                 raise_to(&Cfg::attention_probe_seq_len, intensity("probe_seq_len"))},
       .requires_capability = {.torch_major = 2}},
  };
}

}  // namespace rcl
