// Configuration in-process: validation from the field tables, presets, config files and --set
// overrides resolved into a RunConfig. The CLI as a user runs it: tests/binary/test_config.cpp.
#include <gtest/gtest.h>

#include "support/config_error.hpp"
#include "support/resolve_args.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <torch/version.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/run/cli.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
template <typename Check>
void expect_refused(Check check, const std::string& needle) {
  const std::string refusal = testing::config_error_of(check);
  EXPECT_NE(refusal.find(needle), std::string::npos)
      << "expected a refusal with '" << needle << "': '" << refusal << "'";
}

template <typename Config>
void expect_invalid(const Config& c, const std::string& needle) {
  expect_refused([&] { validate(c); }, needle);
}

// An enum key no struct can hold a wrong value of: the smoke preset's training section with
// `key` set to `text`, read as resolution reads it.
void expect_invalid_key(const std::string& key, const std::string& text, const std::string& needle) {
  nlohmann::json values = find_preset("smoke").training;
  values[key] = text;
  expect_refused([&] { parse_training_config(values); }, needle);
}

using rcl::testing::resolve_args;

TEST(Validate, PresetsAreValid) {
  for (const auto& p : presets()) {
    EXPECT_NO_THROW(validate(p.training)) << p.name;
    EXPECT_NO_THROW(validate(p.stress)) << p.name;
  }
  EXPECT_NO_THROW(validate(DiagnosticsConfig{}));
}

TEST(Validate, RejectsInvalidFieldsAndCombinationsNamingThem) {
  const TrainingConfig ok = find_preset("smoke").training;
  auto with = [&](auto mutate) {
    TrainingConfig c = ok;
    mutate(c);
    return c;
  };
  expect_invalid(with([](auto& c) { c.hidden_size = 130; }), "hidden_size=130: must be divisible by num_heads=4");
  expect_invalid(with([](auto& c) { c.seq_len = 0; }), "seq_len=0");
  expect_invalid_key("mixed_precision", "fp8", "mixed_precision='fp8'");
  expect_invalid(with([](auto& c) {
                   c.grad_accum_steps = 2;
                   c.grad_sync_interval = 4;
                 }),
                 "grad_sync_interval=4: must be <= grad_accum_steps=2");
  expect_invalid(with([](auto& c) { c.dropout = 1.0; }), "dropout=1");
  expect_invalid(with([](auto& c) {
                   c.position = PositionEncoding::rotary;
                   c.num_heads = 64;
                 }),
                 "even head dimension");
  expect_invalid_key("attention_backend", "flash", "allowed: auto, math, sdpa");
  expect_invalid_key("device", "tpu", "allowed: auto, cpu, gpu");
  expect_invalid(with([](auto& c) { c.learning_rate = -1; }), "learning_rate");
  expect_invalid(with([](auto& c) { c.num_key_value_heads = 3; }),
                 "invalid num_key_value_heads=3: must divide num_heads=4 (0 = num_heads)");
  expect_invalid(with([](auto& c) { c.num_key_value_heads = -1; }), "invalid num_key_value_heads=-1: must be >= 0");
  expect_invalid_key("determinism", "some", "invalid determinism='some': allowed: off, replay, all");
  EXPECT_NO_THROW(validate(with([](auto& c) { c.num_key_value_heads = 2; })));
}

TEST(Validate, PerFieldChecksComeFromTheFieldTablesWithTheirTexts) {
  const TrainingConfig ok = find_preset("smoke").training;
  auto with = [&](auto mutate) {
    TrainingConfig c = ok;
    mutate(c);
    return c;
  };
  expect_invalid(with([](auto& c) { c.max_duration_s = -1; }),
                 "invalid max_duration_s=-1: must be >= 0 (0 = no time limit)");
  expect_invalid(with([](auto& c) { c.dropout = 1.0; }), "invalid dropout=1: must be in [0, 1)");
  expect_invalid(with([](auto& c) { c.min_lr_ratio = 2; }), "invalid min_lr_ratio=2: must be in [0, 1]");
  expect_invalid(with([](auto& c) { c.bucket_mb = 0; }), "invalid bucket_mb=0: must be > 0");
  expect_invalid(with([](auto& c) { c.collective_timeout_s = 0; }), "invalid collective_timeout_s=0: must be > 0");
  expect_invalid_key("norm", "batchnorm", "invalid norm='batchnorm': allowed: layernorm, rmsnorm");
  DiagnosticsConfig d;
  d.window_steps = 2;
  expect_invalid(d, "invalid diagnostics.window_steps=2: must be >= 3");
  d = {};
  d.slowdown_ratio_warn = 1.0;
  expect_invalid(d, "invalid diagnostics.slowdown_ratio_warn=1: must be > 1");
  StressProfile s = find_preset("small").stress;
  s.set("gemm", "precision", "fp32");
  expect_invalid(s, "invalid stress_profile.gemm.precision='fp32': allowed: bf16, fp16");
  s = find_preset("small").stress;
  s.set("memory", "min_seq_len", "long");
  expect_invalid(s, "invalid stress_profile.memory.min_seq_len=\"long\": expected a number");
  s = find_preset("small").stress;
  s.set("memory", "max_seq_len", 1);
  expect_invalid(s, "unknown config key 'stress_profile.memory.max_seq_len'");
}

TEST(FieldTables, CoverEveryMemberWithItsDefault) {
  // The X-macros put every member in its table; the tables' defaults are the structs'.
  const nlohmann::json training = TrainingConfig{}, diagnostics = DiagnosticsConfig{};
  EXPECT_EQ(training.size(), training_fields().size());
  EXPECT_EQ(diagnostics.size(), diagnostics_fields().size());
  for (const auto& f : training_fields()) EXPECT_EQ(training.at(f.name), f.default_value) << f.name;
  for (const auto& f : diagnostics_fields()) EXPECT_EQ(diagnostics.at(f.name), f.default_value) << f.name;
}

// An enum key reads each of its allowed names and writes it back as it was given.
TEST(FieldTables, EnumKeysRoundTripEveryAllowedName) {
  const auto round_trips = [](const nlohmann::json& section, const std::vector<ConfigField>& fields, auto parse) {
    for (const auto& f : fields) {
      if (f.check.kind != FieldCheck::kOneOf) continue;
      for (const auto& name : f.check.allowed) {
        nlohmann::json values = section;
        values[f.name] = name;
        EXPECT_EQ(nlohmann::json(parse(values)).at(f.name), name) << f.name;
      }
    }
  };
  round_trips(find_preset("smoke").training, training_fields(), parse_training_config);
  round_trips(RocmConfig{}, rocm_fields(), parse_rocm_config);
}

TEST(Presets, UnknownPresetListsKnownOnes) {
  const std::string refusal = testing::config_error_of([] { find_preset("huge"); });
  EXPECT_NE(refusal.find("known presets are smoke, cpu-medium, small, large"), std::string::npos) << refusal;
  EXPECT_EQ(default_preset_name(false), "smoke");
  EXPECT_EQ(default_preset_name(true), "small");
}

TEST(Overrides, SetNamesTrainingStressProfileAndDiagnosticsFields) {
  const auto run = resolve_args({"--set", "seq_len=32", "--set", "stress_profile.memory.min_seq_len=128", "--set",
                                 "norm=rmsnorm", "--set", "diagnostics.loss_spike_zscore=9", "--stress", "memory"});
  EXPECT_EQ(run.base.seq_len, 32);
  EXPECT_EQ(run.training.seq_len, 128);
  EXPECT_EQ(run.training.norm, NormKind::rmsnorm);
  EXPECT_EQ(run.diagnostics.loss_spike_zscore, 9.0);
  EXPECT_THROW(resolve_args({"--set", "no_such_field=1"}), ConfigError);
  EXPECT_THROW(resolve_args({"--set", "seq_len=abc"}), ConfigError);
  EXPECT_THROW(resolve_args({"--set", "seq_len=1.5"}), ConfigError);
  EXPECT_THROW(resolve_args({"--set", "seq_len"}), ConfigError);
  EXPECT_THROW(resolve_args({"--set", "stress_profile.memory.nope=1"}), ConfigError);
  EXPECT_THROW(resolve_args({"--set", "stress_profile.memory.min_seq_len=1.5"}), ConfigError);
  EXPECT_THROW(resolve_args({"--set", "stress_profile.gemm.precision=fp32"}), ConfigError);
  // A number intensity given as an integer stays a number, as the struct field did.
  const auto wide = resolve_args({"--set", "stress_profile.gemm.min_ffn_multiplier=5"});
  EXPECT_TRUE(to_json(wide).at("stress_profile").at("gemm").at("min_ffn_multiplier").is_number_float());
  EXPECT_EQ(wide.stress_profile.number("gemm", "min_ffn_multiplier"), 5.0);
}

TEST(Overrides, DedicatedFlagsWinAndStressAppliesLast) {
  const auto run = resolve_args({"--steps", "7", "--seed", "99", "--precision", "fp32", "--stress", "gemm"});
  EXPECT_EQ(run.training.steps, 7);
  EXPECT_EQ(run.training.seed, 99u);
  EXPECT_EQ(run.base.mixed_precision, Precision::fp32);
  EXPECT_EQ(run.training.mixed_precision, Precision::bf16);  // gemm prefers reduced precision
}

// `auto` is resolved once, for the run's device and the precision its modes leave, before the
// modes: the base, the composed config and the fit hold what runs, config.json (to_json) also what
// was asked for. A CPU run is resolve_args's; a device posed by --device-memory is a GPU, as the
// modes take it.
TEST(AttentionBackendAuto, TheRunResolvesItBeforeTheModesAndRecordsTheRequest) {
  const AttentionBackend sdpa_where_built = TORCH_VERSION_MAJOR >= 2 ? AttentionBackend::sdpa : AttentionBackend::math;
  const auto by_default = resolve_args({});  // fp32 on the CPU
  ASSERT_EQ(by_default.training.mixed_precision, Precision::fp32);
  EXPECT_EQ(by_default.attention_backend_requested, AttentionBackend::automatic);
  EXPECT_EQ(by_default.base.attention_backend, sdpa_where_built);
  EXPECT_EQ(by_default.training.attention_backend, sdpa_where_built);
  const auto doc = to_json(by_default);
  EXPECT_EQ(doc.at("attention_backend_requested"), "auto");
  EXPECT_EQ(doc.at("training").at("attention_backend"), name_of(sdpa_where_built));
  EXPECT_EQ(doc.at("base_training").at("attention_backend"), name_of(sdpa_where_built));
  EXPECT_EQ(resolve_args({"--set", "attention_backend=auto"}).training, by_default.training);

  const auto chosen = resolve_args({"--set", "attention_backend=sdpa_math"});
  EXPECT_EQ(chosen.attention_backend_requested, AttentionBackend::sdpa_math);
  EXPECT_EQ(chosen.training.attention_backend, AttentionBackend::sdpa_math);
  EXPECT_EQ(to_json(chosen).at("attention_backend_requested"), "sdpa_math");

  const auto posed_gpu = resolve_args({"--device-memory", "1000TB", "--precision", "bf16"});
  EXPECT_EQ(posed_gpu.base.attention_backend, sdpa_where_built);
  EXPECT_EQ(posed_gpu.training.attention_backend, sdpa_where_built);
  EXPECT_EQ(posed_gpu.fit->training.attention_backend, sdpa_where_built);
  // On the CPU in bf16 or with dropout `auto` is the explicit path, also where the gemm mode makes
  // the bf16 or the rng mode the dropout; the attention mode turns it into SDPA.
  EXPECT_EQ(resolve_args({"--precision", "bf16"}).training.attention_backend, AttentionBackend::math);
  EXPECT_EQ(resolve_args({"--set", "dropout=0.1"}).training.attention_backend, AttentionBackend::math);
  const auto rng = resolve_args({"--stress", "rng"});
  EXPECT_GT(rng.training.dropout, 0.0);
  EXPECT_EQ(rng.training.attention_backend, AttentionBackend::math);
  const auto gemm = resolve_args({"--stress", "gemm"});
  EXPECT_EQ(gemm.training.mixed_precision, Precision::bf16);
  EXPECT_EQ(gemm.base.attention_backend, AttentionBackend::math);
  EXPECT_EQ(gemm.training.attention_backend, AttentionBackend::math);
  const auto attention = resolve_args({"--stress", "gemm,attention"});
  EXPECT_EQ(attention.base.attention_backend, AttentionBackend::math);
  EXPECT_EQ(attention.training.attention_backend, sdpa_where_built);
}

TEST(ConfigFile, PrintedConfigRoundTripsAndBadFilesAreErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcl-cfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto first = resolve_args({"--stress", "rng,memory", "--set", "hidden_size=64", "--output-dir", "x"});
  { std::ofstream(dir / "run.json") << to_json(first).dump(); }
  const auto again = resolve_args({"--config", (dir / "run.json").string(), "--output-dir", "x"});
  EXPECT_EQ(again.training, first.training);
  EXPECT_EQ(again.stress_modes, first.stress_modes);
  // A file asking for `auto` is resolved as the default is.
  std::ofstream(dir / "auto.json") << R"({"training": {"attention_backend": "auto"}})";
  const auto from_file = resolve_args({"--config", (dir / "auto.json").string()});
  EXPECT_EQ(from_file.attention_backend_requested, AttentionBackend::automatic);
  EXPECT_EQ(from_file.training.attention_backend, resolve_args({}).training.attention_backend);

  std::ofstream(dir / "bad-key.json") << R"({"training": {"hiden_size": 64}})";
  std::ofstream(dir / "bad-type.json") << R"({"training": {"hidden_size": "big"}})";
  std::ofstream(dir / "not-json.json") << "{ nope";
  for (const char* name : {"bad-key.json", "bad-type.json", "not-json.json", "missing.json"})
    EXPECT_THROW(resolve_args({"--config", (dir / name).string()}), ConfigError) << name;
  std::filesystem::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
