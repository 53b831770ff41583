// Configuration: validation, presets, config files, --set overrides and the stable CLI.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/cli_runner.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/run/cli.hpp"

using namespace rcl;
using rcl::testing::read_text;
using rcl::testing::run_cli;

namespace {
template <typename Config>
void expect_invalid(const Config& c, const std::string& needle) {
  try {
    validate(c);
    ADD_FAILURE() << "accepted config expected to fail with '" << needle << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

RunConfig resolve_args(std::vector<std::string> args) {
  args.insert(args.begin(), "rocm-conformance-llm");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  int code = 0;
  auto options = parse_cli(static_cast<int>(argv.size()), argv.data(), code);
  if (!options) throw std::runtime_error("parse failed");
  return resolve_run_config(*options, /*gpu_present=*/false);
}
}  // namespace

TEST(Validate, PresetsAreValid) {
  for (const auto& p : presets()) {
    EXPECT_NO_THROW(validate(p.training)) << p.name;
    EXPECT_NO_THROW(validate(p.stress)) << p.name;
  }
  EXPECT_NO_THROW(validate(DiagnosticsConfig{}));
}

TEST(Validate, RejectsInvalidFieldsAndCombinationsNamingThem) {
  const TrainingConfig ok = find_preset("smoke").training;
  auto with = [&](auto mutate) { TrainingConfig c = ok; mutate(c); return c; };
  expect_invalid(with([](auto& c) { c.hidden_size = 130; }), "hidden_size=130: must be divisible by num_heads=4");
  expect_invalid(with([](auto& c) { c.seq_len = 0; }), "seq_len=0");
  expect_invalid(with([](auto& c) { c.mixed_precision = "fp8"; }), "mixed_precision='fp8'");
  expect_invalid(with([](auto& c) { c.grad_accum_steps = 2; c.grad_sync_interval = 4; }),
                 "grad_sync_interval=4: must be <= grad_accum_steps=2");
  expect_invalid(with([](auto& c) { c.dropout = 1.0; }), "dropout=1");
  expect_invalid(with([](auto& c) { c.position = "rotary"; c.num_heads = 64; }), "even head dimension");
  expect_invalid(with([](auto& c) { c.attention_backend = "flash"; }), "allowed: math, sdpa");
  expect_invalid(with([](auto& c) { c.device = "tpu"; }), "allowed: auto, cpu, gpu");
  expect_invalid(with([](auto& c) { c.learning_rate = -1; }), "learning_rate");
}

TEST(Validate, PerFieldChecksComeFromTheFieldTablesWithTheirTexts) {
  const TrainingConfig ok = find_preset("smoke").training;
  auto with = [&](auto mutate) { TrainingConfig c = ok; mutate(c); return c; };
  expect_invalid(with([](auto& c) { c.max_duration_s = -1; }), "invalid max_duration_s=-1: must be >= 0 (0 = no time limit)");
  expect_invalid(with([](auto& c) { c.dropout = 1.0; }), "invalid dropout=1: must be in [0, 1)");
  expect_invalid(with([](auto& c) { c.min_lr_ratio = 2; }), "invalid min_lr_ratio=2: must be in [0, 1]");
  expect_invalid(with([](auto& c) { c.bucket_mb = 0; }), "invalid bucket_mb=0: must be > 0");
  expect_invalid(with([](auto& c) { c.collective_timeout_s = 0; }), "invalid collective_timeout_s=0: must be > 0");
  expect_invalid(with([](auto& c) { c.norm = "batchnorm"; }), "invalid norm='batchnorm': allowed: layernorm, rmsnorm");
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

TEST(Presets, UnknownPresetListsKnownOnes) {
  try {
    find_preset("huge");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("known presets are smoke, cpu-medium, small, large"), std::string::npos);
  }
  EXPECT_EQ(default_preset_name(false), "smoke");
  EXPECT_EQ(default_preset_name(true), "small");
}

TEST(Overrides, SetNamesTrainingStressProfileAndDiagnosticsFields) {
  const auto run = resolve_args({"--set", "seq_len=32", "--set", "stress_profile.memory.min_seq_len=128", "--set",
                                 "norm=rmsnorm", "--set", "diagnostics.loss_spike_zscore=9", "--stress", "memory"});
  EXPECT_EQ(run.base.seq_len, 32);
  EXPECT_EQ(run.training.seq_len, 128);
  EXPECT_EQ(run.training.norm, "rmsnorm");
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
  EXPECT_EQ(run.base.mixed_precision, "fp32");
  EXPECT_EQ(run.training.mixed_precision, "bf16");  // gemm prefers reduced precision
}

TEST(ConfigFile, PrintedConfigRoundTripsAndBadFilesAreErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcl-cfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto first = resolve_args({"--stress", "rng,memory", "--set", "hidden_size=64", "--output-dir", "x"});
  {
    std::ofstream(dir / "run.json") << to_json(first).dump();
  }
  const auto again = resolve_args({"--config", (dir / "run.json").string(), "--output-dir", "x"});
  EXPECT_EQ(again.training, first.training);
  EXPECT_EQ(again.stress_modes, first.stress_modes);

  std::ofstream(dir / "bad-key.json") << R"({"training": {"hiden_size": 64}})";
  std::ofstream(dir / "bad-type.json") << R"({"training": {"hidden_size": "big"}})";
  std::ofstream(dir / "not-json.json") << "{ nope";
  for (const char* name : {"bad-key.json", "bad-type.json", "not-json.json", "missing.json"})
    EXPECT_THROW(resolve_args({"--config", (dir / name).string()}), ConfigError) << name;
  std::filesystem::remove_all(dir);
}

// The stable command-line contract, exercised through the real binary.
TEST(Cli, PrintConfigIsOneJsonObjectAndOrderIndependent) {
  // --device cpu: the default preset depends on the device (smoke on CPU, small on a GPU).
  const auto a = run_cli("--device cpu --stress rng,gemm,memory --output-dir o --print-config");
  const auto b = run_cli("--device cpu --stress 'memory, gemm,rng,gemm' --output-dir o --print-config");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out);
  EXPECT_EQ(ja, nlohmann::json::parse(b.out));
  EXPECT_EQ(ja.at("stress_modes"), nlohmann::json({"gemm", "rng", "memory"}));
  EXPECT_EQ(ja.at("preset"), "smoke");
}

// Deterministic mode (the rng stress mode switches it on) makes libtorch refuse a GPU BLAS GEMM
// unless CUBLAS_WORKSPACE_CONFIG is deterministic: the run sets it during setup, before any GEMM,
// records it in config.json, and never overrides a user's value.
TEST(Cli, DeterministicModeSetsTheBlasWorkspaceConfigBeforeTheFirstGemm) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcl-blas-env-" + std::to_string(::getpid()));
  const auto recorded = [&](const std::string& args, const std::string& env) {
    const auto r = run_cli("--device cpu --steps 1 --set eval_interval=0 --overwrite --output-dir " + dir.string() +
                               " " + args,
                           env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto doc = nlohmann::json::parse(read_text(dir / "config.json"));
    const auto& env_doc = doc.at("environment").at("env");
    return env_doc.contains("CUBLAS_WORKSPACE_CONFIG") ? env_doc.at("CUBLAS_WORKSPACE_CONFIG").get<std::string>()
                                                       : std::string("unset");
  };
  EXPECT_EQ(recorded("--stress rng", "env -u CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_EQ(recorded("--set deterministic=true", "env -u CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_EQ(recorded("--stress rng", "CUBLAS_WORKSPACE_CONFIG=:16:8"), ":16:8");
  EXPECT_EQ(recorded("", "env -u CUBLAS_WORKSPACE_CONFIG"), "unset");
  std::filesystem::remove_all(dir);
}

TEST(Cli, BadInputExitsTwoWithOneLineNamingTheValue) {
  struct Case { std::string args, needle; };
  for (const Case& c : std::vector<Case>{{"--stress gemm,bogus", "unknown mode 'bogus'"},
                                         {"--stress ''", "empty list"},
                                         {"--preset huge", "unknown preset 'huge'"},
                                         {"--device tpu", "device='tpu'"},
                                         {"--steps 0", "steps=0"},
                                         {"--set hidden_size=130", "hidden_size=130"},
                                         {"--no-such-flag", "no-such-flag"}}) {
    const auto r = run_cli(c.args + " --print-config");
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(Cli, ListAndExplainStress) {
  const auto list = run_cli("--list-stress");
  EXPECT_EQ(list.exit_code, 0);
  for (const char* target : {"rocBLAS", "rocRAND", "RCCL", "ROCr", "MIOpen"})
    EXPECT_NE(list.out.find(target), std::string::npos) << target;
  const auto explain = run_cli("--stress all --explain-stress");
  EXPECT_EQ(explain.exit_code, 0);
  EXPECT_NE(explain.out.find("memory  seq_len"), std::string::npos) << explain.out;
}

TEST(Cli, HelpConfigListsEveryKeyWithTypeDefaultAllowedAndMeaning) {
  const auto r = run_cli("--help-config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* entry : {"training.hidden_size (integer, default 128, >= 1)\n    model width",
                            "training.mixed_precision (string, default \"fp32\", fp32 | bf16 | fp16)",
                            "stress_profile.memory.min_seq_len (integer, default 8192, >= 1)",
                            "stress_profile.rng.min_dropout (number, default 0.1, [0, 1))",
                            "diagnostics.window_steps (integer, default 10, >= 3)"})
    EXPECT_NE(r.out.find(entry), std::string::npos) << entry;
  for (const auto& f : training_fields()) EXPECT_NE(r.out.find("training." + f.name + " ("), std::string::npos);
  for (const auto& f : diagnostics_fields()) EXPECT_NE(r.out.find("diagnostics." + f.name + " ("), std::string::npos);
}

// Each block between "<!-- generated: rocm-conformance-llm ARGS -->" and "<!-- end generated -->"
// in these pages is the binary's output for ARGS, so the docs cannot drift from the code.
// Regenerate with scripts/update_docs.sh.
TEST(Docs, GeneratedBlocksMatchWhatTheBinaryPrintsNow) {
  const std::string begin = "<!-- generated: rocm-conformance-llm ", end = "<!-- end generated -->";
  for (const char* page : {"README.md", "docs/stress-modes.md", "docs/configuration.md"}) {
    const std::string text = read_text(std::filesystem::path(RCL_SOURCE_DIR) / page);
    int blocks = 0;
    for (size_t at = text.find(begin); at != std::string::npos; at = text.find(begin, at + 1), ++blocks) {
      const size_t args_end = text.find(" -->\n", at);
      ASSERT_NE(args_end, std::string::npos) << page;
      const std::string args = text.substr(at + begin.size(), args_end - at - begin.size());
      const size_t body = args_end + 5;
      const size_t stop = text.find(end, body);
      ASSERT_NE(stop, std::string::npos) << page << ": no end marker after " << args;
      const auto r = run_cli(args);
      ASSERT_EQ(r.exit_code, 0) << args << ": " << r.err;
      EXPECT_EQ(text.substr(body, stop - body), r.out)
          << page << ": the block for '" << args << "' is stale; run scripts/update_docs.sh";
    }
    EXPECT_GE(blocks, 1) << page << " has no generated block";
  }
}
