// Composition properties of the stress modes: order independence, validity, idempotence and
// "each mode changes only the fields it declares", over every subset and permutation.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"

using namespace rcl;

namespace {

std::vector<std::vector<std::string>> all_subsets() {
  const auto names = stress_mode_names();
  std::vector<std::vector<std::string>> subsets;
  for (unsigned mask = 0; mask < (1u << names.size()); ++mask) {
    std::vector<std::string> subset;
    for (size_t i = 0; i < names.size(); ++i)
      if (mask & (1u << i)) subset.push_back(names[i]);
    subsets.push_back(subset);
  }
  return subsets;
}

// A random valid base config: every field the modes touch varies, on both sides of the
// profile's intensities.
TrainingConfig random_valid_base(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto real = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  const std::vector<std::string> precisions{"fp32", "bf16", "fp16"};
  TrainingConfig c = find_preset(pick(0, 1) ? "smoke" : "small").training;
  c.num_heads = pick(1, 16);
  c.hidden_size = c.num_heads * 2 * pick(1, 64);
  c.num_layers = pick(1, 40);
  c.ffn_multiplier = real(0.5, 8.0);
  c.dropout = real(0.0, 0.5);
  c.drop_path = real(0.0, 0.5);
  c.batch_size = pick(1, 64);
  c.seq_len = pick(1, 20000);
  c.grad_accum_steps = pick(1, 16);
  c.grad_sync_interval = pick(1, c.grad_accum_steps);
  c.activation_checkpointing = pick(0, 1);
  c.mixed_precision = precisions[pick(0, 2)];
  c.position = pick(0, 1) ? "rotary" : "learned";
  c.norm = pick(0, 1) ? "rmsnorm" : "layernorm";
  c.norm_layout = pick(0, 1) ? "sandwich" : "pre";
  c.activation = pick(0, 1) ? "swiglu" : "gelu";
  c.qk_norm = pick(0, 1);
  c.qkv_conv_kernel = pick(0, 1) ? 0 : pick(1, 7);
  c.deterministic = pick(0, 1);
  c.replay_check_interval = pick(0, 100);
  c.checksum_interval = pick(0, 50);
  c.memory_pressure_bytes = pick(0, 1) ? 0 : pick(1, int64_t{1} << 34);
  c.log_per_rank = pick(0, 1);
  validate(c);
  return c;
}

}  // namespace

TEST(StressModes, RegistryHasTheSpecsFiveModesWithDisjointDeclaredFields) {
  EXPECT_EQ(stress_mode_names(), (std::vector<std::string>{"gemm", "rng", "comm", "memory", "fusion"}));
  std::set<std::string> seen;
  const nlohmann::json fields = TrainingConfig{};
  for (const auto& mode : stress_mode_registry()) {
    EXPECT_FALSE(mode.targets.empty()) << mode.name;
    for (const auto& field : mode.declared_fields) {
      EXPECT_TRUE(fields.contains(field)) << mode.name << " declares unknown field " << field;
      EXPECT_TRUE(seen.insert(field).second) << field << " is declared by two modes";
    }
  }
}

TEST(StressModes, EveryPermutationOfEverySubsetComposesToTheSameConfig) {
  std::mt19937_64 rng(7);
  for (const auto& preset : presets()) {
    for (int trial = 0; trial < 3; ++trial) {
      const TrainingConfig base = trial == 0 ? preset.training : random_valid_base(rng);
      for (auto subset : all_subsets()) {
        std::sort(subset.begin(), subset.end());
        const TrainingConfig reference = compose_stress_modes(base, subset, preset.stress);
        int permutations = 0;
        do {
          ASSERT_EQ(compose_stress_modes(base, subset, preset.stress), reference)
              << preset.name << " order-dependent for " << nlohmann::json(subset).dump();
          ++permutations;
        } while (std::next_permutation(subset.begin(), subset.end()));
        EXPECT_GE(permutations, 1);
      }
    }
  }
}

TEST(StressModes, ComposingNeverInvalidatesAValidBaseAndIsIdempotent) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const TrainingConfig base = random_valid_base(rng);
    const StressProfile& profile = find_preset(trial % 2 ? "smoke" : "large").stress;
    for (const auto& subset : all_subsets()) {
      const TrainingConfig once = compose_stress_modes(base, subset, profile);
      ASSERT_NO_THROW(validate(once)) << nlohmann::json(base).dump() << " + " << nlohmann::json(subset).dump();
      // Applying the same modes again changes nothing (a duplicate in --stress is harmless).
      ASSERT_EQ(compose_stress_modes(once, subset, profile), once);
    }
  }
}

TEST(StressModes, EachModeChangesOnlyTheFieldsItDeclares) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const TrainingConfig base = random_valid_base(rng);
    for (const auto& mode : stress_mode_registry()) {
      const auto diff = config_diff(base, mode.apply(base, find_preset("small").stress));
      for (const auto& [field, change] : diff.items())
        EXPECT_NE(std::find(mode.declared_fields.begin(), mode.declared_fields.end(), field),
                  mode.declared_fields.end())
            << mode.name << " changed undeclared field " << field;
    }
  }
}

TEST(StressModes, EachModeHasTheSpecsEffectOnItsPreset) {
  const Preset& p = find_preset("small");
  const TrainingConfig& b = p.training;
  auto with = [&](const std::string& m) { return compose_stress_modes(b, {m}, p.stress); };
  EXPECT_GT(with("gemm").hidden_size, b.hidden_size);
  EXPECT_EQ(with("gemm").hidden_size % b.num_heads, 0);
  EXPECT_NE(with("gemm").mixed_precision, "fp32");
  EXPECT_GT(with("rng").dropout, b.dropout);
  EXPECT_GT(with("rng").drop_path, 0.0);
  EXPECT_TRUE(with("rng").deterministic);
  EXPECT_GT(with("rng").replay_check_interval, 0);
  EXPECT_LT(with("comm").batch_size, b.batch_size);
  EXPECT_EQ(with("comm").grad_sync_interval, 1);
  EXPECT_TRUE(with("comm").log_per_rank);
  EXPECT_GE(with("memory").seq_len, 8192);
  EXPECT_TRUE(with("memory").activation_checkpointing);
  EXPECT_GT(with("memory").grad_accum_steps, b.grad_accum_steps);
  EXPECT_GT(with("fusion").num_layers, b.num_layers);
  EXPECT_EQ(with("fusion").norm_layout, "sandwich");
  EXPECT_EQ(with("fusion").activation, "swiglu");
  EXPECT_GT(with("fusion").qkv_conv_kernel, 0);
  // Intensities scale with the preset: the smoke preset's memory mode stays CPU-sized.
  EXPECT_LT(compose_stress_modes(find_preset("smoke").training, {"memory"}, find_preset("smoke").stress).seq_len,
            8192);
}

TEST(StressModes, ModesOnlyRaiseOrLowerTowardTheirIntensity) {
  // A base already beyond an intensity is left alone: "at least"/"at most" semantics.
  TrainingConfig base = find_preset("small").training;
  base.seq_len = 32768;
  base.batch_size = 1;
  base.hidden_size = 8192;
  const auto out = compose_stress_modes(base, {"memory", "comm", "gemm"}, find_preset("small").stress);
  EXPECT_EQ(out.seq_len, 32768);
  EXPECT_EQ(out.batch_size, 1);
  EXPECT_EQ(out.hidden_size, 8192);
}

TEST(StressParsing, CommaListsAllDuplicatesAndWhitespace) {
  EXPECT_EQ(parse_stress_list("gemm"), (std::vector<std::string>{"gemm"}));
  EXPECT_EQ(parse_stress_list("rng,gemm"), (std::vector<std::string>{"gemm", "rng"}));
  EXPECT_EQ(parse_stress_list(" fusion , gemm,gemm ,rng "), (std::vector<std::string>{"gemm", "rng", "fusion"}));
  EXPECT_EQ(parse_stress_list("all"), stress_mode_names());
  EXPECT_EQ(parse_stress_list("comm,all,gemm"), stress_mode_names());
  EXPECT_EQ(parse_stress_list("gemm,rng,comm,memory,fusion"), stress_mode_names());
}

TEST(StressParsing, UnknownAndEmptyNamesAreRejectedListingKnownModes) {
  for (const std::string bad : {"", " ", "gemm,,rng", "gemm,", ",gemm", "gemm,bogus", "GEMM", "all,x"}) {
    try {
      parse_stress_list(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("known modes: all, gemm, rng, comm, memory, fusion"), std::string::npos) << msg;
    }
  }
}

TEST(StressExplain, ReportsEachModesFieldChanges) {
  const Preset& p = find_preset("smoke");
  const auto changes = explain_stress(p.training, {"memory", "comm"}, p.stress);
  EXPECT_EQ(changes.at("memory").at("seq_len"), nlohmann::json({p.training.seq_len, p.stress.memory.min_seq_len}));
  EXPECT_FALSE(changes.at("comm").contains("grad_sync_interval"));  // already 1: unchanged
  EXPECT_TRUE(changes.at("comm").contains("batch_size"));
  EXPECT_FALSE(changes.contains("gemm"));
}
