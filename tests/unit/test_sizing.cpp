// The sizing model against the memory a CPU training run really takes: the process's peak
// resident set (VmHWM, reset through /proc/self/clear_refs) over what it held before the
// trainer was built. On the CPU libtorch's allocator hands freed tensors straight back to
// malloc, so that peak is what tensors held at once, plus malloc's own overhead: the bound
// here is 15%, the GPU target (docs/sizing.md). Also: the terms follow their formulas.
#include <gtest/gtest.h>

#include <malloc.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/workload/attention_kernels.hpp"
#include "rocm_conformance_llm/workload/lm_head.hpp"
#include "rocm_conformance_llm/workload/memory_ballast.hpp"
#include "rocm_conformance_llm/workload/sizing.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

const DeviceDescription kHost{.name = "host", .capacity_bytes = int64_t{1} << 40, .accelerator = false};

int64_t status_kib(const std::string& key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  return -1;
}

// Peak bytes the trainer of `cfg` added to the process over `steps` steps (VmHWM - VmRSS before).
int64_t measured_peak(TrainingConfig cfg, int64_t steps = 2) {
  cfg.steps = steps;
  cfg.eval_interval = 0;
  cfg.device = DeviceChoice::cpu;
  malloc_trim(0);  // what earlier runs freed goes back to the OS, not into this run's tensors
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";  // VmHWM := VmRSS
  }
  const int64_t before = status_kib("VmRSS");
  if (status_kib("VmHWM") > before + 1024) return -1;  // the peak was not reset: no measurement
  {
    RunContext ctx;
    ctx.cfg = testing::on_the_cpu(cfg);
    Trainer trainer(ctx);
    const MemoryBallast ballast(cfg.memory_pressure_bytes, torch::kCPU);  // as the run holds it
    trainer.run();
  }
  return (status_kib("VmHWM") - before) * 1024;
}

// Thread pools, BLAS buffers, malloc arenas and the kernels' first-use caches (SDPA's CPU kernel
// on libtorch 2.x: 1.5-2.5 MiB) come with the first step of a process, not with the configuration:
// one run of the smoke preset's shape first, so the measured runs see only their own tensors.
// Every tensor of more than 64 KiB gets its own mapping, returned when freed (a fixed threshold
// also stops glibc from raising it after frees): the resident set follows live tensors.
void warm_up_once() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 10);
    mallopt(M_TRIM_THRESHOLD, 0);
    measured_peak(find_preset("smoke").training, 1);
    return true;
  }();
  (void)done;
}

TrainingConfig smoke_at(int64_t batch, int64_t seq, Precision precision = Precision::fp32) {
  TrainingConfig cfg = find_preset("smoke").training;
  cfg.batch_size = batch;
  cfg.seq_len = seq;
  cfg.mixed_precision = precision;
  return testing::on_the_cpu(cfg);
}

// As a run composes: `auto` resolved for the precision the modes leave (the gemm mode's bf16
// keeps the explicit path on a CPU).
TrainingConfig composed(TrainingConfig base, const std::string& modes) {
  const auto list = parse_stress_list(modes);
  const auto profile = complete_stress_profile(find_preset("smoke").stress);
  const auto caps = Capabilities::of_this_build(false);
  base.attention_backend = AttentionBackend::automatic;
  return compose_stress_modes(with_attention_resolved(base, list, profile, caps), list, profile, caps).training;
}

struct Case {
  std::string label;
  TrainingConfig cfg;
};

class SizingVsMeasured : public ::testing::TestWithParam<int> {};

std::vector<Case> cases() {
  TrainingConfig checkpointed = smoke_at(16, 256);
  checkpointed.activation_checkpointing = true;
  TrainingConfig whole_blocks = checkpointed;
  whole_blocks.checkpoint_keep_attention = false;
  TrainingConfig wide_vocab = smoke_at(8, 128);
  wide_vocab.vocab_size = 8192;
  const TrainingConfig bf16 = smoke_at(16, 256, Precision::bf16);
  TrainingConfig gqa = smoke_at(16, 256);
  gqa.num_key_value_heads = 1;
  std::vector<Case> all = {
      {"smoke preset", testing::on_the_cpu(find_preset("smoke").training)},
      {"smoke at batch 16, seq 256", smoke_at(16, 256)},
      {"the same, checkpointed (attention kept)", checkpointed},
      {"the same, checkpointed (whole blocks recomputed)", whole_blocks},
      {"smoke, vocab 8192 (logits and loss)", wide_vocab},
      {"smoke, bf16 autocast", bf16},
      {"smoke, grouped-query attention (1 KV head of 4)", gqa},
      {"smoke + fusion,rng", composed(smoke_at(8, 256), "fusion,rng")},
      {"cpu-medium preset", testing::on_the_cpu(find_preset("cpu-medium").training)},
      {"smoke + memory,gemm (checkpointed, bf16, ballast)", composed(smoke_at(8, 64), "memory,gemm")},
  };
  // Where `auto` resolves to SDPA on the CPU, the explicit path is held to the model too; and SDPA
  // asked for with dropout, which runs SDPA's math kernel on a CPU.
  if (sdpa_available()) {
    for (TrainingConfig math : {smoke_at(16, 256), checkpointed}) {
      math.attention_backend = AttentionBackend::math;
      all.push_back({fmt::format("the explicit path at batch {}, seq {}{}", math.batch_size, math.seq_len,
                                 math.activation_checkpointing ? ", checkpointed" : ""),
                     math});
    }
    TrainingConfig sdpa_with_dropout = composed(smoke_at(8, 256), "fusion,rng");
    sdpa_with_dropout.attention_backend = AttentionBackend::sdpa;
    all.push_back({"smoke + fusion,rng, SDPA asked for (dropout: its math kernel)", sdpa_with_dropout});
  }
  return all;
}

TEST_P(SizingVsMeasured, PredictedPeakWithin15PercentOfTheMeasuredOne) {
  warm_up_once();
  const Case c = cases().at(size_t(GetParam()));
  // One step of the case itself first: oneDNN keeps the primitives of each shape it has run, with
  // their scratchpads, for the process's life (on a CPU with native bf16, libtorch 2.11, about
  // 9 MiB for the checkpointed bf16 case: VmHWM fell from 102 to 93 MiB with its cache off).
  // Library state the first step of a shape adds, not the tensors the model predicts.
  measured_peak(c.cfg, 1);
  const auto predicted = predict_step(c.cfg, kHost);
  const int64_t measured = measured_peak(c.cfg);
  if (measured < 0) GTEST_SKIP() << "this kernel does not reset VmHWM through /proc/self/clear_refs";
  const double error = double(predicted.allocated_peak_bytes - measured) / double(measured);
  std::cout << fmt::format("{} ({} attention): predicted {:.1f} MiB (peak in {}), measured {:.1f} MiB, {:+.1f}%\n",
                           c.label, name_of(c.cfg.attention_backend), double(predicted.allocated_peak_bytes) / (1 << 20),
                           predicted.peak_phase,
                           double(measured) / (1 << 20), 100 * error);
  EXPECT_LT(std::abs(error), 0.15) << c.label << ": " << predicted.to_json().dump();
}

INSTANTIATE_TEST_SUITE_P(CpuPresets, SizingVsMeasured, ::testing::Range(0, int(cases().size())));

int64_t term(const std::vector<MemoryTerm>& terms, const std::string& name) {
  for (const auto& t : terms)
    if (t.name == name) return t.bytes;
  return -1;
}

TEST(Sizing, TermsFollowTheirFormulas) {
  const DeviceDescription gpu{.name = "posed", .capacity_bytes = 80'000'000'000, .peak_flops = 1e15};
  TrainingConfig cfg = find_preset("small").training;
  cfg.vocab_size = 50257;
  cfg.attention_backend = AttentionBackend::math;
  const auto p = predict_step(cfg, gpu);
  EXPECT_EQ(p.parameters, parameter_count(cfg));
  EXPECT_EQ(term(p.resident, "parameters"), 4 * p.parameters);
  EXPECT_EQ(term(p.resident, "optimizer_state"), 8 * p.parameters);
  // The chunked loss: one chunk's logits (2048 of the batch's 8192 tokens), the head weight cast
  // and its float32 gradient over the 50304 padded rows, the gradient of the hidden rows.
  const int64_t tokens = cfg.batch_size * cfg.seq_len;
  ASSERT_GT(tokens, kLossChunkTokens);
  EXPECT_EQ(term(p.step, "logits_and_loss"),
            12 * kLossChunkTokens * 50257 + (2 + 4) * 50304 * cfg.hidden_size + 2 * tokens * cfg.hidden_size);
  int64_t resident = 0, step = 0;
  for (const auto& t : p.resident) resident += t.bytes;
  for (const auto& t : p.step) step += t.bytes;
  EXPECT_EQ(p.allocated_peak_bytes, resident + std::max(step, term(p.optimizer, "update_temporaries")));
  EXPECT_EQ(p.allocator_slack_bytes, std::llround(kAllocatorSlackFraction * double(p.allocated_peak_bytes)));
  EXPECT_EQ(predict_step(cfg, kHost).allocator_slack_bytes, 0) << "the host's malloc keeps no tensor cache";
  EXPECT_DOUBLE_EQ(p.model_flops_per_step,
                   flops_per_token(cfg) * double(cfg.batch_size * cfg.seq_len * cfg.grad_accum_steps));
  EXPECT_DOUBLE_EQ(p.ideal_step_s, p.hardware_flops_per_step / 1e15);

  // Math attention holds L x B H T^2 scores; fused attention none, but a padding mask per layer.
  const int64_t scores = cfg.num_layers * cfg.batch_size * cfg.num_heads * cfg.seq_len * cfg.seq_len;
  EXPECT_GE(term(p.step, "attention_scores"), scores * (4 + 2));
  TrainingConfig fused = cfg;
  fused.attention_backend = AttentionBackend::sdpa;
  EXPECT_EQ(term(predict_step(fused, gpu).step, "attention_scores"), -1);
  fused.attention_pad_fraction = 0.25;
  EXPECT_EQ(term(predict_step(fused, gpu).step, "attention_scores"),
            cfg.num_layers * cfg.batch_size * cfg.seq_len * cfg.seq_len * 2);

  // Whole-block checkpointing keeps one input per block, and costs a recomputed forward in
  // hardware FLOPs.
  TrainingConfig checkpointed = fused;
  checkpointed.activation_checkpointing = true;
  checkpointed.checkpoint_keep_attention = false;
  const auto c = predict_step(checkpointed, gpu);
  EXPECT_EQ(c.checkpointed_activation_bytes_per_layer, cfg.batch_size * cfg.seq_len * cfg.hidden_size * 4);
  EXPECT_LT(c.allocated_peak_bytes, predict_step(fused, gpu).allocated_peak_bytes);
  EXPECT_GT(c.hardware_flops_per_step, c.model_flops_per_step);
  EXPECT_EQ(gib_text(int64_t{3} << 29), "1.5 GiB");
}

// SDPA on the host runs libtorch's CPU flash kernel only without dropout; with dropout its math
// kernel materialises the scores as the explicit path does. An accelerator's fused kernels take
// dropout and keep no scores.
TEST(Sizing, HostSdpaWithDropoutCountsTheMathKernelsScores) {
  const DeviceDescription gpu{.name = "posed", .capacity_bytes = 80'000'000'000};
  TrainingConfig cfg = smoke_at(8, 256);
  cfg.attention_backend = AttentionBackend::sdpa;
  EXPECT_EQ(term(predict_step(cfg, kHost).step, "attention_scores"), -1);
  cfg.dropout = 0.1;
  TrainingConfig math = cfg;
  math.attention_backend = AttentionBackend::math;
  const int64_t host_scores = term(predict_step(cfg, kHost).step, "attention_scores");
  EXPECT_GE(host_scores, cfg.num_layers * cfg.batch_size * cfg.num_heads * cfg.seq_len * cfg.seq_len * (4 + 4 + 4));
  EXPECT_EQ(host_scores, term(predict_step(math, kHost).step, "attention_scores"));
  EXPECT_EQ(term(predict_step(cfg, gpu).step, "attention_scores"), -1);
}

// Checkpointing that keeps attention keeps, per block beside its input, what the kernel's backward
// reads and the heads-merged output (fused: Q, K, V, the output and its log-sum-exp, the
// projection's input); on the math path the scores too. It recomputes the blocks' GEMMs but not
// attention's QK^T and AV (4 L C T per token of the 12).
TEST(Sizing, KeptAttentionIsCountedPerLayerAndIsNotRecomputed) {
  const DeviceDescription gpu{.name = "posed", .capacity_bytes = 80'000'000'000, .peak_flops = 1e15};
  TrainingConfig kept;
  kept.hidden_size = 1024, kept.num_heads = 16, kept.num_layers = 4, kept.seq_len = 2048, kept.batch_size = 4;
  kept.vocab_size = 50257;
  kept.mixed_precision = Precision::bf16;
  kept.attention_backend = AttentionBackend::sdpa;
  kept.activation_checkpointing = true;
  TrainingConfig whole_blocks = kept;
  whole_blocks.checkpoint_keep_attention = false;
  const auto k = predict_step(kept, gpu), w = predict_step(whole_blocks, gpu);
  const int64_t BT = kept.batch_size * kept.seq_len, C = kept.hidden_size, H = kept.num_heads, L = kept.num_layers;
  const int64_t per_layer = BT * (2 * 3 * C + (2 * C + 4 * H) + 2 * C);  // QKV output; output and LSE; proj input
  EXPECT_EQ(term(k.step, "kept_attention"), L * per_layer);
  EXPECT_EQ(term(w.step, "kept_attention"), -1);
  EXPECT_EQ(k.checkpointed_activation_bytes_per_layer, w.checkpointed_activation_bytes_per_layer + per_layer);
  EXPECT_GT(k.peak_bytes, w.peak_bytes);
  TrainingConfig no_checkpointing = kept;
  no_checkpointing.activation_checkpointing = false;
  EXPECT_LT(k.peak_bytes, predict_step(no_checkpointing, gpu).peak_bytes);

  const double tokens = double(BT * kept.grad_accum_steps);
  const double blocks_forward = (flops_per_token(kept) - 6.0 * double(kept.vocab_size * C)) / 3.0;
  EXPECT_DOUBLE_EQ(w.hardware_flops_per_step - w.model_flops_per_step, blocks_forward * tokens);
  EXPECT_DOUBLE_EQ(w.hardware_flops_per_step - k.hardware_flops_per_step, 4.0 * double(L * C * kept.seq_len) * tokens);
  EXPECT_DOUBLE_EQ(k.model_flops_per_step, w.model_flops_per_step);

  // The math path keeps every layer's probabilities (float32 softmax output and its bf16 copy).
  TrainingConfig math = kept;
  math.attention_backend = AttentionBackend::math;
  EXPECT_GE(term(predict_step(math, gpu).step, "kept_attention"),
            L * kept.batch_size * H * kept.seq_len * kept.seq_len * (4 + 2));
}

// The Llama-shaped preset: its 128256-token vocabulary is in the parameters (the tied LM head),
// the FLOPs (6 V C per token) and the logits and cross-entropy; GQA's narrower K and V are in
// the parameters and the activations, whose repeat to every query head is counted too.
TEST(Sizing, VocabularyAndGroupedQueryAttentionAreCounted) {
  const DeviceDescription gpu{.name = "posed", .capacity_bytes = 192'000'000'000, .peak_flops = 1e15};
  const TrainingConfig cfg = testing::resolved_for(find_preset("large").training, Capabilities::of_this_build(true));
  const auto p = predict_step(cfg, gpu);
  const int64_t tokens = cfg.batch_size * cfg.seq_len;
  EXPECT_EQ(p.vocab_size, 128256);
  // The chunked loss's term, or the block's backward workspace where that is larger.
  const int64_t loss = 12 * kLossChunkTokens * cfg.vocab_size +
                       (2 + 4) * padded_vocab(cfg.vocab_size) * cfg.hidden_size + 2 * tokens * cfg.hidden_size;
  const int64_t kept = term(p.step, "logits_and_loss");
  EXPECT_TRUE(kept == loss || (kept == -1 && term(p.step, "backward_workspace") >= loss)) << kept << " " << loss;
  TrainingConfig small_vocab = cfg;
  small_vocab.vocab_size = 64;
  EXPECT_DOUBLE_EQ(p.model_flops_per_step - predict_step(small_vocab, gpu).model_flops_per_step,
                   6.0 * double((cfg.vocab_size - 64) * cfg.hidden_size) * double(tokens * cfg.grad_accum_steps));
  TrainingConfig mha = cfg;
  mha.num_key_value_heads = 0;
  const auto m = predict_step(mha, gpu);
  EXPECT_LT(p.parameters, m.parameters);
  EXPECT_LT(p.model_flops_per_step, m.model_flops_per_step);
  // Per token and block: K and V at 512 wide instead of 2048 (QKV output, rotated K), plus the
  // repeated K and V at full width: (2 + 1) x 1536 fewer, 2 x 2048 more, in bf16.
  EXPECT_EQ(p.activation_bytes_per_layer - m.activation_bytes_per_layer, tokens * 2 * (2 * 2048 - 3 * 1536));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
