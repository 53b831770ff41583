// Composition properties of the stress modes: order independence, validity, idempotence and
// "each mode changes only the fields it writes", over every subset and permutation; the
// registry-wide rule properties that make them hold; run-time registration of a mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/stress_modes.hpp"
#include "support/config_error.hpp"
#include "support/resolved_config.hpp"

#include <torch/version.h>

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

const Capabilities kCpu = Capabilities::of_this_build(/*gpu=*/false);

// What a run composes: its base resolved for `caps` and the modes first (`auto` attention), as
// run/cli_resolve.cpp resolves it before the modes.
StressComposition run_composition(const TrainingConfig& base, const std::vector<std::string>& modes,
                                  const StressProfile& p, const Capabilities& caps) {
  return compose_stress_modes(with_attention_resolved(base, modes, p, caps), modes, p, caps);
}

nlohmann::json run_explanation(const TrainingConfig& base, const std::vector<std::string>& modes,
                               const StressProfile& p, const Capabilities& caps) {
  return explain_stress(with_attention_resolved(base, modes, p, caps), modes, p, caps);
}

TrainingConfig compose(const TrainingConfig& base, const std::vector<std::string>& modes, const StressProfile& p) {
  return run_composition(base, modes, p, kCpu).training;
}

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
  const std::vector<Precision> precisions{Precision::fp32, Precision::bf16, Precision::fp16};
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
  c.position = pick(0, 1) ? PositionEncoding::rotary : PositionEncoding::learned;
  c.norm = pick(0, 1) ? NormKind::rmsnorm : NormKind::layernorm;
  c.norm_layout = pick(0, 1) ? NormLayout::sandwich : NormLayout::pre;
  c.activation = pick(0, 1) ? Activation::swiglu : Activation::gelu;
  c.qk_norm = pick(0, 1);
  c.qkv_conv_kernel = pick(0, 1) ? 0 : pick(1, 7);
  c.deterministic = pick(0, 1);
  const std::vector<Determinism> levels{Determinism::off, Determinism::replay, Determinism::all};
  c.determinism = levels[pick(0, 2)];
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= c.num_heads; ++d)
    if (c.num_heads % d == 0) divisors.push_back(d);
  c.num_key_value_heads = pick(0, 1) ? 0 : divisors[pick(0, int64_t(divisors.size()) - 1)];
  c.replay_check_interval = pick(0, 100);
  c.checksum_interval = pick(0, 50);
  c.memory_pressure_bytes = pick(0, 1) ? 0 : pick(1, int64_t{1} << 34);
  c.log_per_rank = pick(0, 1);
  const std::vector<AttentionBackend> backends{AttentionBackend::automatic, AttentionBackend::math,
                                               AttentionBackend::sdpa, AttentionBackend::sdpa_flash};
  c.attention_backend = backends[pick(0, 3)];
  c.attention_pad_fraction = pick(0, 1) ? 0.0 : real(0.0, 0.9);
  c.attention_noncontiguous_v = pick(0, 1);
  c.attention_probe_interval = pick(0, 100);
  c.attention_probe_seq_len = pick(0, 8192);
  validate(c);
  return c;
}

const ConfigField& training_field(const std::string& name) {
  const auto& fields = training_fields();
  return *std::find_if(fields.begin(), fields.end(), [&](const ConfigField& f) { return f.name == name; });
}

// A random value of `field`'s type around `value` (the rule's intensity): both sides of it.
nlohmann::json random_value(const ConfigField& field, const nlohmann::json& value, std::mt19937_64& rng) {
  const auto& d = field.default_value;
  if (d.is_boolean()) return std::bernoulli_distribution()(rng);
  if (d.is_string()) {
    auto choices = field.check.allowed;
    choices.push_back(value.is_string() ? value.get<std::string>() : d.get<std::string>());
    return choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
  }
  const double top = 2 * std::abs(value.is_number() ? value.get<double>() : d.get<double>()) + 8;
  if (d.is_number_integer()) return std::uniform_int_distribution<int64_t>(0, static_cast<int64_t>(top))(rng);
  return std::uniform_real_distribution<double>(0, top)(rng);
}

// How much a value stresses, in the rule's direction: an ordered rule only moves its field up
// this order (monotone). A string (a one_of field such as determinism) ranks by its place in the
// field's allowed list. Not order-preserving: gemm's rounding maps a hidden_size just under its
// floor above one just over it, and composition does not need it.
double stress_rank(const ConfigField& field, StressOp op, const nlohmann::json& v) {
  const auto& allowed = field.check.allowed;
  const double x = v.is_string()
                       ? double(std::find(allowed.begin(), allowed.end(), v.get<std::string>()) - allowed.begin())
                       : v.get<double>();
  switch (op) {
    case StressOp::kAtLeast:
    case StressOp::kShareAtMost: return x;
    case StressOp::kAtMost: return -x;
    case StressOp::kEvery: return x == 0 ? -std::numeric_limits<double>::infinity() : -x;
    default: return 0;
  }
}

// Checks one rule's law on random values of its field: idempotent, changes nothing else, and
// moves the field only toward its value. Returns the first problem or "".
std::string rule_law_problem(const StressMode& mode, const StressRule& rule, std::mt19937_64& rng) {
  const ConfigField& field = training_field(rule.field);
  nlohmann::json intensities = nlohmann::json::object();
  for (const auto& f : mode.intensities) intensities[f.name] = f.default_value;
  const nlohmann::json& value = rule.intensity.empty() ? rule.literal : intensities.at(rule.intensity);
  const bool numeric = rule.op == StressOp::kAtLeast || rule.op == StressOp::kAtMost || rule.op == StressOp::kEvery;
  const bool share = rule.op == StressOp::kShareAtMost;
  for (int trial = 0; trial < 200; ++trial) {
    nlohmann::json a = random_valid_base(rng);
    a[rule.field] = random_value(field, value, rng);
    nlohmann::json fa = a;
    apply_stress_rule(rule, intensities, fa);
    nlohmann::json again = fa;
    apply_stress_rule(rule, intensities, again);
    const auto& x = a.at(rule.field);
    const auto& y = fa.at(rule.field);
    const std::string where = mode.name + ": " + describe_rule(rule, false) + " on " + x.dump() + " -> " + y.dump();
    if (again != fa) return where + " is not idempotent";
    const auto scales = [&](const std::string& key) {
      return std::any_of(rule.inverse_scales.begin(), rule.inverse_scales.end(),
                         [&](const InverseScale& s) { return s.field == key; });
    };
    for (const auto& [key, v] : a.items()) {
      if (key == rule.field || fa.at(key) == v) continue;
      if (!scales(key)) return where + " changed " + key;
      if (y == x) return where + " scaled " + key + " without raising " + rule.field;
      if (fa.at(key).get<double>() > v.get<double>()) return where + " raised " + key + ", which it scales down";
    }
    if (share) {
      const int64_t count = y.get<int64_t>(), cap = value.get<int64_t>(), align = a.at(rule.aligned_to).get<int64_t>();
      const int64_t width = std::max(a.at(rule.width).get<int64_t>(), intensities.at(rule.width_floor).get<int64_t>());
      if (count < x.get<int64_t>()) return where + " moved against its direction";
      if (count * cap < width) return where + " leaves a share above its cap";
      if (count != x && align > 0 && count % align != 0)
        return where + " raised it off a multiple of " + rule.aligned_to;
    } else if (numeric) {
      if (stress_rank(field, rule.op, y) < stress_rank(field, rule.op, x))
        return where + " moved against its direction";
      if (stress_rank(field, rule.op, y) < stress_rank(field, rule.op, value))
        return where + " stopped short of its value";
    } else {
      const bool ok = rule.op == StressOp::kReplace ? (x == rule.replaces ? y == value : y == x) : y == value;
      if (!ok) return where + " is not the rule's value";
    }
  }
  return "";
}

// The registry-wide property check: what makes every composition commute and idempotent.
std::vector<std::string> registry_problems() {
  std::vector<std::string> problems;
  const nlohmann::json fields = TrainingConfig{};
  std::map<std::string, std::string> writer;
  for (const auto& mode : stress_mode_registry()) {
    if (mode.targets.empty() || mode.summary.empty()) problems.push_back(mode.name + " has no targets/summary");
    // A scaled field is written by its mode alone: scaling commutes with no other rule.
    for (const auto& rule : mode.rules) {
      for (const auto& scale : rule.inverse_scales) {
        if (!fields.contains(scale.field)) problems.push_back(mode.name + " scales unknown field " + scale.field);
        if (const auto [it, fresh] = writer.emplace(scale.field, mode.name); !fresh)
          problems.push_back(scale.field + " is written by " + it->second + " and " + mode.name);
        if (std::none_of(mode.intensities.begin(), mode.intensities.end(),
                         [&](const ConfigField& f) { return f.name == scale.exponent; }))
          problems.push_back(mode.name + " uses undeclared intensity " + scale.exponent);
      }
    }
    for (const auto& f : mode.intensities) {
      const std::string refusal = testing::config_error_of(
          [&] { validate_field(f.default_value, f, "stress_profile." + mode.name + "." + f.name); });
      if (!refusal.empty()) problems.push_back("default: " + refusal);
    }
    for (const auto& rule : mode.rules) {
      if (!fields.contains(rule.field)) {
        problems.push_back(mode.name + " writes unknown field " + rule.field);
        continue;
      }
      // Two modes may share a field only through the very same rule (it commutes with itself).
      if (const auto [it, fresh] = writer.emplace(rule.field, mode.name); !fresh) {
        const auto& modes = stress_mode_registry();
        const auto& other =
            std::find_if(modes.begin(), modes.end(), [&](const StressMode& m) { return m.name == it->second; })->rules;
        const bool same = std::any_of(other.begin(), other.end(), [&](const StressRule& o) {
          return o.field == rule.field && o.op == rule.op && o.literal == rule.literal && o.replaces == rule.replaces &&
                 o.intensity.empty() && rule.intensity.empty();
        });
        if (!same || it->second == mode.name)
          problems.push_back(rule.field + " is written by " + it->second + " and " + mode.name);
      }
      const auto declared = std::find_if(mode.intensities.begin(), mode.intensities.end(),
                                         [&](const ConfigField& f) { return f.name == rule.intensity; });
      if (!rule.intensity.empty() && declared == mode.intensities.end())
        problems.push_back(mode.name + " uses undeclared intensity " + rule.intensity);
    }
  }
  for (const auto& mode : stress_mode_registry()) {
    for (const auto& field : mode.reads()) {
      if (!fields.contains(field)) problems.push_back(mode.name + " reads unknown field " + field);
      if (writer.count(field) && writer[field] != mode.name)
        problems.push_back(mode.name + " reads " + field + ", which " + writer[field] + " writes");
    }
  }
  if (!problems.empty()) return problems;
  std::mt19937_64 rng(11);
  for (const auto& mode : stress_mode_registry())
    for (const auto& rule : mode.rules)
      if (auto problem = rule_law_problem(mode, rule, rng); !problem.empty()) problems.push_back(problem);
  return problems;
}

// Every subset of the registered modes, in every order, composes to the same config.
void expect_order_independent(const Preset& preset, const TrainingConfig& base, const Capabilities& caps) {
  for (auto subset : all_subsets()) {
    std::sort(subset.begin(), subset.end());
    const TrainingConfig reference = run_composition(base, subset, preset.stress, caps).training;
    do {
      ASSERT_EQ(run_composition(base, subset, preset.stress, caps).training, reference)
          << preset.name << " order-dependent for " << nlohmann::json(subset).dump();
    } while (std::next_permutation(subset.begin(), subset.end()));
  }
}

// A throwaway mode, for tests only: one rule on a field no other mode writes, one intensity.
StressMode canary_mode(CapabilityRequirement requirement) {
  return {.name = "canary",
          .targets = "HIP runtime (test only)",
          .summary = "more validation batches",
          .intensities = {{"min_eval_batches", 6, at_least(1), "eval_batches floor"}},
          .rules = {raise_to(&TrainingConfig::eval_batches, intensity("min_eval_batches"))},
          .requires_capability = requirement};
}

TEST(StressRegistry, HasTheSpecsModesAndEveryRuleCommutesAndIsIdempotent) {
  const auto names = stress_mode_names();
  for (const char* spec : {"gemm", "rng", "comm", "memory", "fusion"})
    EXPECT_NE(std::find(names.begin(), names.end(), spec), names.end()) << spec;
  EXPECT_EQ(registry_problems(), std::vector<std::string>{});
}

// A rule names its field by a pointer to the member; what it keeps is the table's key, which the
// config's JSON and `--explain-stress` use.
TEST(StressRules, AFieldNamedByItsMemberIsTheTablesKey) {
  EXPECT_EQ(training_field_name(&TrainingConfig::seq_len), "seq_len");
  EXPECT_EQ(training_field_name(&TrainingConfig::batch_size), "batch_size");  // same type, another member
  EXPECT_EQ(training_field_name(&TrainingConfig::dropout), "dropout");
  EXPECT_EQ(training_field_name(&TrainingConfig::attention_backend), "attention_backend");
  EXPECT_EQ(raise_to_multiple(&TrainingConfig::hidden_size, fixed(256), &TrainingConfig::num_heads, 8).multiple_of,
            "num_heads");
  std::set<std::string> keys;
  for (const auto& f : training_fields()) keys.insert(f.name);
  for (const auto& mode : stress_mode_registry())
    for (const auto& rule : mode.rules) EXPECT_TRUE(keys.contains(rule.field)) << mode.name << ": " << rule.field;
}

TEST(StressRegistry, ThePropertyCheckFailsForAModeThatWritesOrReadsAnotherModesField) {
  const auto expect_problem = [](StressMode mode, const std::string& needle) {
    mode.name = "clash";
    const auto guard = register_stress_mode(std::move(mode));
    const auto problems = registry_problems();
    EXPECT_NE(join(problems, "\n").find(needle), std::string::npos) << join(problems, "\n");
  };
  StressMode writes_seq_len = canary_mode({});
  writes_seq_len.rules = {raise_to(&TrainingConfig::seq_len, intensity("min_eval_batches"))};
  expect_problem(writes_seq_len, "seq_len is written by memory and clash");
  StressMode writes_kv_heads = canary_mode({});
  writes_kv_heads.rules = {raise_to(&TrainingConfig::num_key_value_heads, intensity("min_eval_batches"))};
  expect_problem(writes_kv_heads, "gemm reads num_key_value_heads, which clash writes");
  StressMode reads_hidden = canary_mode({});
  reads_hidden.rules = {
      raise_to_multiple(&TrainingConfig::eval_batches, intensity("min_eval_batches"), &TrainingConfig::hidden_size, 1)};
  expect_problem(reads_hidden, "clash reads hidden_size, which gemm writes");
  StressMode writes_learning_rate = canary_mode({});
  writes_learning_rate.rules = {lower_to(&TrainingConfig::learning_rate, intensity("min_eval_batches"))};
  expect_problem(writes_learning_rate, "learning_rate is written by gemm and clash");
  StressMode scales_batch = canary_mode({});
  scales_batch.rules = {inversely_scaling(raise_to(&TrainingConfig::eval_batches, intensity("min_eval_batches")),
                                          {{&TrainingConfig::batch_size, "nope"}})};
  expect_problem(scales_batch, "batch_size is written by comm and clash");
  expect_problem(scales_batch, "undeclared intensity nope");
  StressMode undeclared = canary_mode({});
  undeclared.rules = {lower_to(&TrainingConfig::eval_batches, intensity("nope"))};
  expect_problem(undeclared, "undeclared intensity nope");
  EXPECT_EQ(registry_problems(), std::vector<std::string>{});  // the guards removed them
}

TEST(StressRegistry, AThrowawayModeIsPickedUpEverywhere) {
  const auto guard = register_stress_mode(canary_mode({.torch_major = 99}));
  const auto names = stress_mode_names();
  ASSERT_EQ(names.back(), "canary");
  EXPECT_EQ(parse_stress_list("all"), names);
  EXPECT_EQ(registry_problems(), std::vector<std::string>{});
  EXPECT_THROW(static_cast<void>(register_stress_mode(canary_mode({}))), ConfigError);  // the name is taken

  const std::string listing = describe_stress_modes(false);
  EXPECT_NE(listing.find("canary  targets HIP runtime (test only)"), std::string::npos) << listing;
  EXPECT_NE(listing.find("rules: eval_batches >= <min_eval_batches>"), std::string::npos) << listing;
  EXPECT_NE(listing.find("requires: libtorch >= 99.0"), std::string::npos) << listing;
  EXPECT_NE(describe_stress_modes(true).find("| `canary` | HIP runtime (test only) | `eval_batches` >= "
                                             "*min_eval_batches* | none | libtorch >= 99.0 |"),
            std::string::npos);
  EXPECT_NE(help_config_text(false).find("stress_profile.canary.min_eval_batches (integer, default 6, >= 1)"),
            std::string::npos);
  ::testing::internal::CaptureStdout();
  const char* help_argv[] = {"rocm-conformance-llm", "--help"};
  int exit_code = -1;
  EXPECT_FALSE(parse_cli(2, help_argv, exit_code));
  const std::string help = ::testing::internal::GetCapturedStdout();
  // CLI11 2.6 (sid) wraps option descriptions at the column width; 2.3 (bookworm) does not.
  std::string flat;  // the help with every run of whitespace as one space
  for (const char c : help) {
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space) flat += c;
    else if (!flat.empty() && flat.back() != ' ') flat += ' ';
  }
  EXPECT_NE(flat.find(join(names, ",") + " or 'all'"), std::string::npos) << help;

  // The capability does not hold: a no-op with its reason, the other modes still apply.
  const Preset& smoke = find_preset("smoke");
  const auto composed = run_composition(smoke.training, names, smoke.stress, kCpu);
  const std::vector<std::string> builtin(names.begin(), names.end() - 1);
  EXPECT_EQ(composed.training, compose(smoke.training, builtin, smoke.stress));
  // Besides canary, only the attention mode may be skipped (libtorch < 2.0).
  ASSERT_EQ(composed.skipped.size(), TORCH_VERSION_MAJOR >= 2 ? 1u : 2u);
  EXPECT_NE(composed.skipped.at("canary").find("needs libtorch >= 99.0"), std::string::npos);
  CliOptions options;
  options.stress = "all";
  options.overrides = {"stress_profile.canary.min_eval_batches=9"};
  const RunConfig run = resolve_run_config(options, /*gpu_present=*/false);
  EXPECT_EQ(run.training.eval_batches, smoke.training.eval_batches);
  EXPECT_EQ(run.stress_profile.integer("canary", "min_eval_batches"), 9);
  EXPECT_EQ(to_json(run).at("stress_skipped").at("canary"), composed.skipped.at("canary"));
  EXPECT_FALSE(explain_stress(run.base, run.stress_modes, run.stress_profile, run.capabilities).contains("canary"));
  EXPECT_NE(explain_text(run).find("canary: skipped (needs libtorch >= 99.0"), std::string::npos);
}

TEST(StressRegistry, AModeNeedingAGpuAppliesOnlyWithOne) {
  const auto guard = register_stress_mode(canary_mode({.gpu = true}));
  const Preset& smoke = find_preset("smoke");
  const auto on_cpu = run_composition(smoke.training, {"canary"}, smoke.stress, kCpu);
  EXPECT_EQ(on_cpu.training, compose(smoke.training, {}, smoke.stress));
  EXPECT_EQ(on_cpu.skipped.at("canary"), "needs a GPU (this run is on the CPU)");
  const Capabilities gpu = Capabilities::of_this_build(/*gpu=*/true);
  const auto on_gpu = run_composition(smoke.training, {"canary"}, smoke.stress, gpu);
  EXPECT_TRUE(on_gpu.skipped.empty());
  EXPECT_EQ(on_gpu.training.eval_batches, 6);  // the declared default: presets do not know canary
  expect_order_independent(smoke, smoke.training, gpu);
}

// Measured on an H100 (docs/gpu-run.md): at `small` the memory mode's seq 8192 through
// math attention is a B*H*T^2 score tensor (12.9 GB bf16) and took 29.7 s/step on an H100. On a
// GPU with SDPA the mode sends it through fused SDPA, alone and combined with every other mode,
// even where the run asked for math (`auto`, the default, is SDPA there already); on the CPU, on
// libtorch 1.x, or with a fused backend already chosen, attention is left alone.
TEST(StressModes, MemoryModeOnAGpuRunsItsLongSequencesThroughFusedSdpa) {
  const Preset& small = find_preset("small");
  ASSERT_EQ(small.training.attention_backend, AttentionBackend::automatic);
  TrainingConfig math = small.training;
  math.attention_backend = AttentionBackend::math;
  const Capabilities gpu2{.torch_major = 2, .torch_minor = 14, .gpu = true};
  for (const auto& modes :
       std::vector<std::vector<std::string>>{{"memory"}, {"memory", "gemm", "rng", "comm", "fusion"}})
    for (const auto& base : {small.training, math}) {
      const auto on_gpu = run_composition(base, modes, small.stress, gpu2).training;
      EXPECT_EQ(on_gpu.seq_len, 8192);
      EXPECT_EQ(on_gpu.attention_backend, AttentionBackend::sdpa)
          << nlohmann::json(modes).dump() << " from " << name_of(base.attention_backend);
    }
  EXPECT_EQ(run_explanation(math, {"memory"}, small.stress, gpu2).at("memory").at("attention_backend"),
            nlohmann::json({"math", "sdpa"}));
  const Capabilities cpu2{.torch_major = 2, .torch_minor = 14, .gpu = false};
  const Capabilities gpu1{.torch_major = 1, .torch_minor = 13, .gpu = true};
  for (const auto& caps : {cpu2, gpu1})
    for (const auto& base : {small.training, math})
      EXPECT_EQ(run_composition(base, {"memory"}, small.stress, caps).training.attention_backend,
                AttentionBackend::math);
  TrainingConfig flash = small.training;
  flash.attention_backend = AttentionBackend::sdpa_flash;
  EXPECT_EQ(run_composition(flash, {"memory"}, small.stress, gpu2).training.attention_backend,
            AttentionBackend::sdpa_flash);
  // The rule says where it applies.
  EXPECT_NE(describe_stress_modes(false).find("attention_backend math -> sdpa (with libtorch >= 2.0, GPU)"),
            std::string::npos);
  expect_order_independent(small, small.training, gpu2);
  expect_order_independent(small, math, gpu2);
}

// `auto` (every preset's default) by the device, precision and dropout given as data: SDPA with
// libtorch >= 2.0 on a GPU, and on a CPU in fp32 without dropout (where its flash kernel runs);
// math on a CPU in bf16/fp16 or with dropout, and below 2.0; a backend the user chose is never
// changed.
TEST(AttentionBackendAuto, IsSdpaWithLibtorch2OnAGpuAndOnACpuInFp32WithoutDropout) {
  const Capabilities gpu2{.torch_major = 2, .torch_minor = 11, .gpu = true};
  const Capabilities cpu2{.torch_major = 2, .torch_minor = 11, .gpu = false};
  const Capabilities gpu1{.torch_major = 1, .torch_minor = 13, .gpu = true};
  const Capabilities cpu1{.torch_major = 1, .torch_minor = 13, .gpu = false};
  const auto automatic = AttentionBackend::automatic;
  for (const auto precision : {Precision::fp32, Precision::bf16, Precision::fp16})
    for (const bool dropout : {false, true}) {
      EXPECT_EQ(resolve_attention_backend(automatic, gpu2, precision, dropout), AttentionBackend::sdpa);
      EXPECT_EQ(resolve_attention_backend(automatic, gpu1, precision, dropout), AttentionBackend::math);
      EXPECT_EQ(resolve_attention_backend(automatic, cpu1, precision, dropout), AttentionBackend::math);
    }
  EXPECT_EQ(resolve_attention_backend(automatic, cpu2, Precision::fp32, false), AttentionBackend::sdpa);
  EXPECT_EQ(resolve_attention_backend(automatic, cpu2, Precision::fp32, true), AttentionBackend::math);
  EXPECT_EQ(resolve_attention_backend(automatic, cpu2, Precision::bf16, false), AttentionBackend::math);
  EXPECT_EQ(resolve_attention_backend(automatic, cpu2, Precision::fp16, false), AttentionBackend::math);
  for (const auto& [chosen, name] : enum_names(AttentionBackend{}))
    if (chosen != automatic)
      for (const auto& caps : {gpu2, cpu2, gpu1, cpu1})
        for (const auto precision : {Precision::fp32, Precision::bf16})
          for (const bool dropout : {false, true})
            EXPECT_EQ(resolve_attention_backend(chosen, caps, precision, dropout), chosen) << name;
}

// The modes' rules see the resolved backend, resolved for the precision and dropout they leave: on
// the CPU the gemm mode's bf16 and the rng mode's dropout keep the explicit path (SDPA's CPU kernel
// is the slower one in bf16, and takes no dropout) and the attention mode still turns it into
// SDPA; in fp32 without dropout `auto` is SDPA already, as on a GPU.
TEST(AttentionBackendAuto, IsResolvedForThePrecisionAndDropoutTheModesLeave) {
  const Preset& smoke = find_preset("smoke");
  ASSERT_EQ(smoke.training.attention_backend, AttentionBackend::automatic);
  ASSERT_EQ(smoke.training.mixed_precision, Precision::fp32);
  const Capabilities cpu2{.torch_major = 2, .torch_minor = 11, .gpu = false};
  const Capabilities cpu1{.torch_major = 1, .torch_minor = 13, .gpu = false};
  const Capabilities gpu2{.torch_major = 2, .torch_minor = 11, .gpu = true};
  const auto backend = [&](const std::vector<std::string>& modes, const Capabilities& caps) {
    return run_composition(smoke.training, modes, smoke.stress, caps).training.attention_backend;
  };
  EXPECT_EQ(backend({}, cpu2), AttentionBackend::sdpa);
  EXPECT_EQ(backend({"gemm"}, cpu2), AttentionBackend::math);
  EXPECT_EQ(backend({"rng"}, cpu2), AttentionBackend::math);
  EXPECT_EQ(backend({"gemm", "attention"}, cpu2), AttentionBackend::sdpa);
  EXPECT_EQ(backend({"rng", "attention"}, cpu2), AttentionBackend::sdpa);
  EXPECT_EQ(backend({"gemm"}, gpu2), AttentionBackend::sdpa);
  EXPECT_EQ(backend({"rng"}, gpu2), AttentionBackend::sdpa);
  EXPECT_EQ(backend({}, cpu1), AttentionBackend::math);
  EXPECT_EQ(backend({"attention"}, cpu1), AttentionBackend::math);
  // What the attention mode changes is judged from the resolved base: on the CPU in bf16 it turns
  // math into SDPA; in fp32, as on a GPU, SDPA is there already.
  TrainingConfig bf16 = smoke.training;
  bf16.mixed_precision = Precision::bf16;
  EXPECT_EQ(run_explanation(bf16, {"attention"}, smoke.stress, cpu2).at("attention").at("attention_backend"),
            nlohmann::json({"math", "sdpa"}));
  for (const auto& caps : {cpu2, gpu2}) {
    const auto fp32 = run_explanation(smoke.training, {"attention"}, smoke.stress, caps);
    EXPECT_FALSE(fp32.at("attention").contains("attention_backend")) << fp32.dump();
  }
}

TEST(StressModes, EveryPermutationOfEverySubsetComposesToTheSameConfig) {
  std::mt19937_64 rng(7);
  for (const auto& preset : presets())
    for (int trial = 0; trial < 3; ++trial)
      expect_order_independent(preset, trial == 0 ? preset.training : random_valid_base(rng), kCpu);
}

TEST(StressModes, ComposingNeverInvalidatesAValidBaseAndIsIdempotent) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const TrainingConfig base = random_valid_base(rng);
    const StressProfile& profile = find_preset(trial % 2 ? "smoke" : "large").stress;
    for (const auto& subset : all_subsets()) {
      const TrainingConfig once = compose(base, subset, profile);
      ASSERT_NO_THROW(validate(once)) << nlohmann::json(base).dump() << " + " << nlohmann::json(subset).dump();
      // Applying the same modes again changes nothing (a duplicate in --stress is harmless).
      ASSERT_EQ(compose(once, subset, profile), once);
    }
  }
}

TEST(StressModes, EachModeChangesOnlyTheFieldsItWrites) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const TrainingConfig base = random_valid_base(rng);
    for (const auto& mode : stress_mode_registry()) {
      const auto writes = mode.writes();
      // From the base with `auto` resolved as the mode's run resolves it: resolution is no mode's change.
      const StressProfile& profile = find_preset("small").stress;
      const TrainingConfig resolved = with_attention_resolved(base, {mode.name}, profile, kCpu);
      const auto diff = config_diff(compose_stress_modes(resolved, {}, profile, kCpu).training,
                                    compose_stress_modes(resolved, {mode.name}, profile, kCpu).training);
      for (const auto& [field, change] : diff.items())
        EXPECT_NE(std::find(writes.begin(), writes.end(), field), writes.end())
            << mode.name << " changed undeclared field " << field;
    }
  }
}

TEST(StressModes, EachModeHasTheSpecsEffectOnItsPreset) {
  const Preset& p = find_preset("small");
  const TrainingConfig& b = p.training;
  auto with = [&](const std::string& m) { return compose(b, {m}, p.stress); };
  EXPECT_GT(with("gemm").hidden_size, b.hidden_size);
  EXPECT_EQ(with("gemm").hidden_size % with("gemm").num_heads, 0);
  EXPECT_GE(with("gemm").num_heads, b.num_heads);
  EXPECT_NE(with("gemm").mixed_precision, Precision::fp32);
  EXPECT_GT(with("rng").dropout, b.dropout);
  EXPECT_GT(with("rng").drop_path, 0.0);
  EXPECT_EQ(with("rng").determinism, Determinism::replay);  // not every step: only the replayed ones
  EXPECT_FALSE(with("rng").deterministic);
  EXPECT_GT(with("rng").replay_check_interval, 0);
  EXPECT_LT(with("comm").batch_size, b.batch_size);
  EXPECT_EQ(with("comm").grad_sync_interval, 1);
  EXPECT_TRUE(with("comm").log_per_rank);
  EXPECT_GE(with("memory").seq_len, 8192);
  EXPECT_TRUE(with("memory").activation_checkpointing);
  EXPECT_GT(with("memory").grad_accum_steps, b.grad_accum_steps);
  EXPECT_GT(with("fusion").num_layers, b.num_layers);
  EXPECT_EQ(with("fusion").norm_layout, NormLayout::sandwich);
  EXPECT_EQ(name_of(with("fusion").activation), p.stress.text("fusion", "activation"));
  EXPECT_GT(with("fusion").qkv_conv_kernel, 0);
  // Intensities scale with the preset: the smoke preset's memory mode stays CPU-sized.
  EXPECT_LT(compose(find_preset("smoke").training, {"memory"}, find_preset("smoke").stress).seq_len, 8192);
}

// determinism is ordered off < replay < all: the rng mode raises off to replay and leaves a
// user's all alone (and the stable bool deterministic=true still means all).
TEST(StressModes, RngModeRaisesDeterminismToReplayAndNeverLowersAll) {
  const Preset& p = find_preset("small");
  for (const auto& [level, expected] :
       std::vector<std::pair<Determinism, Determinism>>{{Determinism::off, Determinism::replay},
                                                        {Determinism::replay, Determinism::replay},
                                                        {Determinism::all, Determinism::all}}) {
    TrainingConfig base = p.training;
    base.determinism = level;
    EXPECT_EQ(compose(base, {"rng"}, p.stress).determinism, expected) << name_of(level);
  }
  TrainingConfig legacy = p.training;
  legacy.deterministic = true;
  EXPECT_EQ(determinism_of(compose(legacy, {"rng"}, p.stress)), Determinism::all);
  EXPECT_EQ(determinism_of(compose(p.training, {"rng"}, p.stress)), Determinism::replay);
  EXPECT_NE(describe_stress_modes(false).find("determinism >= replay (off < replay < all)"), std::string::npos);
}

// The padded batch's attention mask is the attention mode's: any composition without it keeps
// attention_pad_fraction 0, so long sequences go through SDPA's causal path (is_causal, no mask
// tensor), which the flash kernels take.
TEST(StressModes, OnlyTheAttentionModePadsBatches) {
  const Capabilities gpu2{.torch_major = 2, .torch_minor = 11, .gpu = true};
  for (const auto& preset : presets())
    for (auto subset : all_subsets()) {
      const bool attention = std::find(subset.begin(), subset.end(), "attention") != subset.end();
      const auto composed = run_composition(preset.training, subset, preset.stress, gpu2).training;
      EXPECT_EQ(composed.attention_pad_fraction > 0, attention) << preset.name << nlohmann::json(subset).dump();
    }
}

// The gemm mode widens hidden_size; it adds heads so no head grows past max_head_dim (128 by
// default: the fused attention kernels' fast range), in every composition and preset, with the
// grouped key/value heads still dividing the heads. A profile may declare a larger ceiling.
TEST(StressModes, GemmModeKeepsHeadDimWithinItsCeiling) {
  const Capabilities gpu2{.torch_major = 2, .torch_minor = 11, .gpu = true};
  for (const auto& preset : presets())
    for (auto subset : all_subsets()) {
      if (std::find(subset.begin(), subset.end(), "gemm") == subset.end()) continue;
      const auto c = run_composition(preset.training, subset, preset.stress, gpu2).training;
      EXPECT_LE(c.hidden_size / c.num_heads, 128) << preset.name << nlohmann::json(subset).dump();
      EXPECT_EQ(c.num_heads % key_value_heads(c), 0) << preset.name;
      EXPECT_NO_THROW(validate(c)) << preset.name << nlohmann::json(subset).dump();
    }
  // `small`: 12 heads over the floor 2048 would be head_dim 176; 16 heads of 128 instead.
  const Preset& small = find_preset("small");
  const auto gemm = compose(small.training, {"gemm"}, small.stress);
  EXPECT_EQ(gemm.num_heads, 16);
  EXPECT_EQ(gemm.hidden_size, 2048);
  // A base with more heads than the ceiling needs keeps them.
  TrainingConfig many_heads = small.training;
  many_heads.num_heads = 32;
  many_heads.hidden_size = 32 * 24;
  EXPECT_EQ(compose(many_heads, {"gemm"}, small.stress).num_heads, 32);
  // Grouped-query attention: the heads stay a multiple of the key/value heads (the large preset's 8).
  TrainingConfig grouped = small.training;
  grouped.num_key_value_heads = 12;
  const auto grouped_gemm = compose(grouped, {"gemm"}, small.stress);
  EXPECT_EQ(grouped_gemm.num_heads, 24);
  EXPECT_EQ(grouped_gemm.hidden_size % (24 * 8), 0);
  // Declared as the stress: a ceiling of 256 keeps small's 12 heads (hidden rounded to 2112).
  StressProfile wide = small.stress;
  wide.set("gemm", "max_head_dim", 256);
  const auto wide_heads = compose(small.training, {"gemm"}, wide);
  EXPECT_EQ(wide_heads.num_heads, 12);
  EXPECT_EQ(wide_heads.hidden_size, 2112);
}

// The gemm mode widens `small` from 768 to 2048 (16 heads of 128): its learning rate scales by
// 768/2048 (GPT-3's 1/d) and its init std by sqrt(768/2048), once, whatever else
// is composed; a width it does not raise keeps both, and exponents of 0 keep the base's bits.
TEST(StressModes, GemmModeScalesLearningRateAndInitToTheWidth) {
  const Preset& p = find_preset("small");
  const TrainingConfig& b = p.training;
  ASSERT_EQ(b.hidden_size, 768);
  ASSERT_EQ(b.init_std, 0.02);
  const double ratio = 768.0 / 2048.0;
  for (const auto& modes : std::vector<std::vector<std::string>>{{"gemm"}, parse_stress_list("all")}) {
    const TrainingConfig once = compose(b, modes, p.stress);
    EXPECT_EQ(once.hidden_size, 2048);
    EXPECT_DOUBLE_EQ(once.learning_rate, 6e-4 * ratio);  // 2.25e-4; GPT-3 XL (d=2048): 2.0e-4
    EXPECT_DOUBLE_EQ(once.init_std, 0.02 * std::sqrt(ratio));
    EXPECT_EQ(compose(once, modes, p.stress), once);
  }
  const TrainingConfig others = compose(b, {"rng", "comm", "memory", "fusion"}, p.stress);
  EXPECT_EQ(others.learning_rate, b.learning_rate);
  EXPECT_EQ(others.init_std, b.init_std);
  TrainingConfig wide = b;
  wide.hidden_size = 4096;
  EXPECT_EQ(compose(wide, {"gemm"}, p.stress).learning_rate, b.learning_rate);
  StressProfile unscaled = p.stress;
  unscaled.set("gemm", "learning_rate_width_exponent", 0.0);
  unscaled.set("gemm", "init_std_width_exponent", 0.0);
  const TrainingConfig kept = compose(b, {"gemm"}, unscaled);
  EXPECT_EQ(kept.hidden_size, 2048);
  EXPECT_EQ(kept.learning_rate, b.learning_rate);
  EXPECT_EQ(kept.init_std, b.init_std);
  EXPECT_NE(describe_stress_modes(false).find("learning_rate x (old / new hidden_size)^<learning_rate_width_exponent>"),
            std::string::npos);
}

TEST(StressModes, ModesOnlyRaiseOrLowerTowardTheirIntensity) {
  // A base already beyond an intensity is left alone: "at least"/"at most" semantics.
  TrainingConfig base = find_preset("small").training;
  base.seq_len = 32768;
  base.batch_size = 1;
  base.hidden_size = 8192;
  const auto out = compose(base, {"memory", "comm", "gemm"}, find_preset("small").stress);
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
  EXPECT_EQ(parse_stress_list(join(stress_mode_names(), ",")), stress_mode_names());
}

TEST(StressParsing, UnknownAndEmptyNamesAreRejectedListingKnownModes) {
  for (const std::string bad : {"", " ", "gemm,,rng", "gemm,", ",gemm", "gemm,bogus", "GEMM", "all,x"}) {
    const std::string msg = testing::config_error_of([&] { parse_stress_list(bad); });
    EXPECT_NE(msg.find("known modes: all, " + join(stress_mode_names())), std::string::npos)
        << "'" << bad << "': " << msg;
  }
}

TEST(StressExplain, ReportsEachModesFieldChanges) {
  const Preset& p = find_preset("smoke");
  const auto changes = run_explanation(p.training, {"memory", "comm"}, p.stress, kCpu);
  EXPECT_EQ(changes.at("memory").at("seq_len"),
            nlohmann::json({p.training.seq_len, p.stress.integer("memory", "min_seq_len")}));
  EXPECT_FALSE(changes.at("comm").contains("grad_sync_interval"));  // already 1: unchanged
  EXPECT_TRUE(changes.at("comm").contains("batch_size"));
  EXPECT_FALSE(changes.contains("gemm"));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
