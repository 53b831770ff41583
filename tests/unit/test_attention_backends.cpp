// Attention backends and the attention parity probe: backend x dtype x device validation (GPU
// rules checked with the device given as data), the padding mask, every SDPA backend this
// build has against the explicit math path (forward, training, float64 gradients), the probe
// clean on the model's own inputs and failing on exactly the injected backend, and the attention
// stress mode as data. SDPA exists from libtorch 2.0: the tests that need it skip on 1.13 only,
// saying so. Through the binary: tests/binary/test_attention.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "rocm_conformance_llm/workload/sizing.hpp"
#include "support/config_error.hpp"
#include "support/resolved_config.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

#define RCL_REQUIRE_SDPA() \
  if (!sdpa_available()) GTEST_SKIP() << "needs at::scaled_dot_product_attention (libtorch >= 2.0)"

// The backends whose kernel serves this CPU (2.x: math, flash; never memory-efficient).
std::vector<std::string> cpu_backends() {
  std::vector<std::string> out;
  for (const std::string b : {"math", "sdpa", "sdpa_math", "sdpa_flash", "sdpa_mem_efficient"}) {
    TrainingConfig cfg;
    cfg.attention_backend = *parse_name<AttentionBackend>(b);
    if (testing::config_error_of([&] { check_attention_backend(cfg, torch::kCPU); }).empty()) out.push_back(b);
  }
  return out;
}

std::string refusal(const std::string& backend, const std::string& precision, torch::DeviceType device,
                    double pad_fraction = 0.0) {
  TrainingConfig cfg;
  cfg.attention_backend = *parse_name<AttentionBackend>(backend);
  cfg.mixed_precision = *parse_name<Precision>(precision);
  cfg.attention_pad_fraction = pad_fraction;
  return testing::config_error_of([&] { check_attention_backend(cfg, device); });
}

TEST(AttentionBackends, ValidationRefusesWhatTheDeviceKernelCannotTake) {
  EXPECT_EQ(refusal("math", "fp32", torch::kCUDA), "");
  if (!sdpa_available()) {
    for (const char* b : {"sdpa", "sdpa_flash"})
      EXPECT_NE(refusal(b, "bf16", torch::kCPU).find("needs libtorch >= 2.0"), std::string::npos) << b;
    return;
  }
  // The GPU flash kernel takes fp16/bf16 only and no mask; CPU flash takes float32 and masks.
  const std::string flash_fp32 = refusal("sdpa_flash", "fp32", torch::kCUDA);
  EXPECT_NE(flash_fp32.find("invalid attention_backend='sdpa_flash'"), std::string::npos) << flash_fp32;
  EXPECT_NE(flash_fp32.find("fp16/bf16 only"), std::string::npos) << flash_fp32;
  EXPECT_NE(flash_fp32.find("allowed here: math, sdpa, sdpa_math, sdpa_mem_efficient"), std::string::npos);
  EXPECT_EQ(flash_fp32.find('\n'), std::string::npos);
  EXPECT_EQ(refusal("sdpa_flash", "bf16", torch::kCUDA), "");
  EXPECT_EQ(refusal("sdpa_flash", "fp16", torch::kCUDA), "");
  EXPECT_NE(refusal("sdpa_flash", "bf16", torch::kCUDA, 0.25).find("no attention mask"), std::string::npos);
  EXPECT_EQ(refusal("sdpa_flash", "fp32", torch::kCPU, 0.25), "");
  EXPECT_EQ(refusal("sdpa_mem_efficient", "fp32", torch::kCUDA, 0.25), "");
  EXPECT_NE(refusal("sdpa_mem_efficient", "fp32", torch::kCPU).find("no memory-efficient"), std::string::npos);
  EXPECT_EQ(cpu_backends(), (std::vector<std::string>{"math", "sdpa", "sdpa_math", "sdpa_flash"}));
  // CPU flash takes no dropout (the GPU's does): refused, not a crash at the first step.
  TrainingConfig dropout{.dropout = 0.1, .mixed_precision = Precision::bf16};
  dropout.attention_backend = AttentionBackend::sdpa_flash;
  const std::string cpu_flash = testing::config_error_of([&] { check_attention_backend(dropout, torch::kCPU); });
  EXPECT_NE(cpu_flash.find("takes no dropout"), std::string::npos) << cpu_flash;
  EXPECT_NE(cpu_flash.find("allowed here: math, sdpa, sdpa_math"), std::string::npos) << cpu_flash;
  EXPECT_EQ(testing::config_error_of([&] { check_attention_backend(dropout, torch::kCUDA); }), "");
}

TEST(AttentionBackends, PaddingMaskIsCausalAndMasksTheTailOfEverySecondSequence) {
  EXPECT_EQ(padded_length(64, 0.25), 48);
  EXPECT_EQ(padded_length(4, 0.99), 1);  // never empty
  const auto mask = padded_causal_mask(3, 8, 0.25, torch::kCPU);
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{3, 1, 8, 8}));
  const auto causal = torch::ones({8, 8}, torch::kBool).tril();
  EXPECT_TRUE(torch::equal(mask[0][0], causal));
  EXPECT_TRUE(torch::equal(mask[2][0], causal));
  auto padded = causal.clone();
  padded.slice(1, 6).fill_(false);
  EXPECT_TRUE(torch::equal(mask[1][0], padded));
  EXPECT_TRUE(mask.select(-1, 0).all().item<bool>());  // every query keeps key 0
}

TEST(AttentionBackends, StridedViewKeepsTheValuesAndTheLastDimensionContiguous) {
  const auto v = torch::randn({2, 3, 5, 4});
  const auto s = strided_view_of(v);
  EXPECT_TRUE(torch::equal(s, v));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.stride(-1), 1);
  EXPECT_EQ(s.stride(-2), 12);
}

TrainingConfig tiny_model(const std::string& backend) {
  return {.hidden_size = 32,
          .num_layers = 2,
          .seq_len = 24,
          .num_heads = 2,
          .vocab_size = 50,
          .position = PositionEncoding::rotary,
          .attention_backend = *parse_name<AttentionBackend>(backend)};
}

// Every backend this CPU serves computes the same model as the explicit path (also padded, with
// a strided V), and one training step through it gives finite, matching gradients.
TEST(AttentionBackends, EveryCpuBackendMatchesTheExplicitPathAndTrains) {
  RCL_REQUIRE_SDPA();
  SdpaBackendScope restore_after("sdpa");  // each GPT below sets the process-global switches
  const auto tokens = torch::randint(0, 50, {4, 24});
  for (const double pad : {0.0, 0.25}) {
    for (const bool strided : {false, true}) {
      auto make = [&](const std::string& backend) {
        torch::manual_seed(7);
        auto cfg = tiny_model(backend);
        cfg.attention_pad_fraction = pad;
        cfg.attention_noncontiguous_v = strided;
        return GPT(cfg);
      };
      GPT reference = make("math");
      const auto ref_loss = lm_loss(reference->forward(tokens), tokens);
      ref_loss.backward();
      for (const auto& backend : cpu_backends()) {
        GPT model = make(backend);
        const auto loss = lm_loss(model->forward(tokens), tokens);
        EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), 1e-5) << backend << " pad " << pad;
        loss.backward();
        const auto params = model->parameters(), ref_params = reference->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          ASSERT_TRUE(params[i].grad().isfinite().all().item<bool>()) << backend;
          EXPECT_TRUE(torch::allclose(params[i].grad(), ref_params[i].grad(), 1e-3, 1e-5)) << backend << " param " << i;
        }
      }
    }
  }
}

// Gradient check of the SDPA path against the explicit math path in float64: outputs and the
// gradients of Q, K and V agree to float64 rounding, causal and with the padding mask.
TEST(AttentionBackends, SdpaGradientsMatchTheExplicitPathInFloat64) {
  RCL_REQUIRE_SDPA();
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto q0 = torch::randn({2, 2, 16, 8}, opts), k0 = torch::randn({2, 2, 16, 8}, opts);
  const auto v0 = torch::randn({2, 2, 16, 8}, opts), upstream = torch::randn({2, 2, 16, 8}, opts);
  const auto padded = padded_causal_mask(2, 16, 0.25, torch::kCPU);
  const auto causal = torch::ones({16, 16}, torch::kBool).tril();
  auto grads = [&](const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>&
                       attend) {
    auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    const auto out = attend(q, k, v);
    auto g = torch::autograd::grad({out}, {q, k, v}, {upstream});
    g.insert(g.begin(), out.detach());
    return g;
  };
  for (const std::string backend : {"sdpa_math", "sdpa_flash"}) {
    for (const bool masked : {false, true}) {
      const auto expected =
          grads([&](auto q, auto k, auto v) { return explicit_attention(q, k, v, masked ? padded : causal); });
      const auto got = grads([&](auto q, auto k, auto v) {
        SdpaBackendScope only(backend);
        return sdpa_attention(q, k, v, masked ? padded : torch::Tensor());
      });
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT((got[i] - expected[i]).abs().max().item<double>(), 1e-12)
            << backend << (masked ? " masked" : " causal") << " tensor " << i;
    }
  }
}

// Tolerances documented in docs/attention.md: reduced precision is looser by its unit roundoff,
// and even bf16's bound is far below the wrong results the field notes report (1.73 vs math).
TEST(AttentionProbe, BoundsFollowTheDtypeAndStayFarBelowAWrongRow) {
  const double fp32 = attention_bound(torch::kFloat, 2.0, 1024), fp16 = attention_bound(torch::kHalf, 2.0, 1024),
               bf16 = attention_bound(torch::kBFloat16, 2.0, 1024);
  EXPECT_LT(fp32, fp16);
  EXPECT_LT(fp16, bf16);
  EXPECT_LT(bf16, 0.1);
  EXPECT_LT(fp32, 1e-4);
}

AttentionInputs model_inputs(uint64_t seed) {
  torch::manual_seed(seed);
  GPT model(tiny_model("math"));
  return capture_attention_inputs(model, torch::randint(0, 50, {3, 24}));
}

// The model's own Q/K/V through every backend, dtype, mask and V layout: nothing outside its
// bound (several seeds), and the combinations without a kernel here are named, not failed.
TEST(AttentionProbe, CleanProbeOfTheModelsOwnInputsPassesOnSeveralSeeds) {
  for (const uint64_t seed : {1, 2, 3}) {
    const AttentionInputs inputs = model_inputs(seed);
    ASSERT_EQ(inputs.q.sizes(), (std::vector<int64_t>{3, 2, 24, 16}));
    const auto results = probe_attention(inputs, torch::kCPU, {.seq_len = 96});
    ASSERT_EQ(results.size(), attention_probe_backends().size() * 3 * 2 * 2);
    int64_t run = 0;
    for (const auto& r : results) {
      EXPECT_TRUE(r.passed()) << r.describe() << ": " << r.to_json().dump();
      if (!r.supported) EXPECT_FALSE(r.reason.empty()) << r.describe();
      run += r.supported ? 1 : 0;
      // The explicit path in fp32 runs everywhere; SDPA's math backend everywhere it exists.
      if (r.dtype == "fp32" && (r.backend == "math" || r.backend == "sdpa_math")) EXPECT_TRUE(r.supported);
    }
    EXPECT_GE(run, int64_t(attention_probe_backends().size() == 1 ? 4 : 12));
  }
}

// attention-mask-corrupt: one backend's masked outputs, in every dtype and layout, and nothing
// else fails.
TEST(AttentionProbe, InjectedMaskCorruptionFailsOnlyTheMaskedOutputsOfOneBackend) {
  const auto results = probe_attention(model_inputs(1), torch::kCPU, {.seq_len = 48, .corrupt_masked = true});
  std::set<std::string> failed_backends;
  int64_t failed = 0;
  for (const auto& r : results) {
    EXPECT_EQ(r.passed(), !r.injected) << r.describe();
    if (r.passed()) continue;
    EXPECT_TRUE(r.masked) << r.describe();
    EXPECT_GT(r.max_error, 10 * r.bound) << r.describe();
    failed_backends.insert(r.backend);
    ++failed;
  }
  ASSERT_EQ(failed_backends.size(), 1u);
  // The last backend that serves a mask here: the explicit path on 1.13, CPU flash on 2.x.
  EXPECT_EQ(*failed_backends.begin(), sdpa_available() ? "sdpa_flash" : "math");
  EXPECT_GE(failed, 2);
}

// A check probes again on what start-up prepared: the same results without recomputing the
// float64 references, and a fault on a later probe still caught against them.
TEST(AttentionProbe, APreparedProbeRunsAgainWithTheSameVerdictAndStillCatchesTheFault) {
  const auto prepared = prepare_attention_probe(model_inputs(2), torch::kCPU, {.seq_len = 48});
  const auto first = run_attention_probe(prepared, false), again = run_attention_probe(prepared, false);
  const auto whole = probe_attention(model_inputs(2), torch::kCPU, {.seq_len = 48});
  ASSERT_EQ(first.size(), whole.size());
  ASSERT_EQ(again.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(first[i].to_json(), whole[i].to_json()) << whole[i].describe();
    EXPECT_EQ(again[i].to_json(), whole[i].to_json()) << whole[i].describe();
    EXPECT_TRUE(again[i].passed()) << whole[i].describe();
  }
  const auto struck = run_attention_probe(prepared, true);
  EXPECT_TRUE(std::any_of(struck.begin(), struck.end(), [](const auto& r) { return r.injected && !r.passed(); }));
  EXPECT_TRUE(std::all_of(struck.begin(), struck.end(), [](const auto& r) { return r.injected || r.passed(); }));
}

// The attention mode as data: on 2.x it switches to SDPA, pads, strides V and turns the probe
// on; below 2.0 it is a no-op whose reason is recorded (the preset's `auto` is math there).
TEST(AttentionStressMode, AppliesWithSdpaAndIsARecordedNoOpWithout) {
  const Preset& smoke = find_preset("smoke");
  const Capabilities old_torch{.torch_major = 1, .torch_minor = 13}, new_torch{.torch_major = 2, .torch_minor = 14};
  const auto old_build =
      compose_stress_modes(testing::resolved_for(smoke.training, old_torch), {"attention"}, smoke.stress, old_torch);
  TrainingConfig math = smoke.training;
  math.attention_backend = AttentionBackend::math;
  EXPECT_EQ(old_build.training, math);
  EXPECT_EQ(old_build.skipped.at("attention"), "needs libtorch >= 2.0 (this build has 1.13)");
  const auto new_build =
      compose_stress_modes(testing::resolved_for(smoke.training, new_torch), {"attention"}, smoke.stress, new_torch);
  EXPECT_TRUE(new_build.skipped.empty());
  EXPECT_EQ(new_build.training.attention_backend, AttentionBackend::sdpa);
  EXPECT_EQ(new_build.training.attention_pad_fraction, 0.25);
  EXPECT_TRUE(new_build.training.attention_noncontiguous_v);
  EXPECT_EQ(new_build.training.attention_probe_interval, 50);
  EXPECT_EQ(new_build.training.attention_probe_seq_len, 256);
  auto flash = smoke.training;
  flash.attention_backend = AttentionBackend::sdpa_flash;  // a chosen fused backend stays
  EXPECT_EQ(compose_stress_modes(flash, {"attention"}, smoke.stress, {.torch_major = 2}).training.attention_backend,
            AttentionBackend::sdpa_flash);
}

// `auto` is resolved once, by the run, for its device: the stress rules, the step's sizing and
// the model refuse a config that still says it rather than guess which device it was meant for.
TEST(AttentionBackendAuto, WhatReadsTheRunsConfigRefusesAnUnresolvedBackend) {
  const Preset& smoke = find_preset("smoke");
  ASSERT_EQ(smoke.training.attention_backend, AttentionBackend::automatic);
  const Capabilities cpu = Capabilities::of_this_build(/*gpu=*/false);
  EXPECT_THROW(compose_stress_modes(smoke.training, {}, smoke.stress, cpu), std::logic_error);
  EXPECT_THROW(predict_step(smoke.training, DeviceDescription{.name = "the host"}), std::logic_error);
  EXPECT_THROW(GPT{tiny_model("auto")}, std::logic_error);
  const TrainingConfig resolved = testing::resolved_for(smoke.training, cpu);
  EXPECT_NO_THROW(compose_stress_modes(resolved, {}, smoke.stress, cpu));
  EXPECT_NO_THROW(predict_step(resolved, DeviceDescription{.name = "the host"}));
  EXPECT_NO_THROW(GPT{tiny_model("math")});
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
