// The presets as data, and their lookup by name.
#include "rocm_conformance_llm/config/presets.hpp"

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

constexpr int64_t MiB = int64_t{1} << 20;

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

}  // namespace rcl
