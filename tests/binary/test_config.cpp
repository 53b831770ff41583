// The stable command-line contract through the real binary: --print-config, bad input, the
// stress listings, --help-config and the generated docs. In-process resolution:
// tests/unit/test_config_resolution.cpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using rcl::testing::kSmokeCpu;
using rcl::testing::read_text;
using rcl::testing::run_cli;

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

// Deterministic mode (the rng stress mode's determinism=replay switches it on around its replays,
// deterministic=true for every step) makes libtorch refuse a GPU BLAS GEMM
// unless CUBLAS_WORKSPACE_CONFIG is deterministic: the run sets it during setup, before any GEMM,
// records it in config.json, and never overrides a user's value.
TEST(Cli, DeterministicModeSetsTheBlasWorkspaceConfigBeforeTheFirstGemm) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcl-blas-env-" + std::to_string(::getpid()));
  const auto recorded = [&](const std::string& args, const std::string& env) {
    const auto r = run_cli(
        "--device cpu --steps 1 --set eval_interval=0 --overwrite --output-dir " + dir.string() + " " + args, env);
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

// How the bf16 GEMMs ran is in the log, config.json and report.json: forced either way here (the
// device's own answer depends on the CPU: platform/device.hpp choose_reduced_gemm), float32 runs no
// bf16 GEMM to speak of, and a misspelt override is refused before anything runs.
TEST(Cli, TheLogAndReportsSayHowTheBf16GemmsRan) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcl-reduced-gemm-" + std::to_string(::getpid()));
  const auto run = [&](const std::string& precision, const std::string& env) {
    const auto r =
        run_cli(kSmokeCpu + "--steps 2 --overwrite --precision " + precision + " --output-dir " + dir.string(), env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto config = nlohmann::json::parse(read_text(dir / "config.json")).at("reduced_precision_gemm");
    EXPECT_EQ(nlohmann::json::parse(read_text(dir / "report.json")).at("reduced_precision_gemm"), config);
    return std::make_pair(config, r.out + r.err);
  };
  const auto [emulated, emulated_log] = run("bf16", "RCL_REDUCED_GEMM=float32");
  EXPECT_EQ(emulated.at("path"), "float32");
  EXPECT_NE(emulated_log.find("bf16 GEMMs: computed in float32 on bf16 operands, results rounded to bf16"),
            std::string::npos);
  const auto [native, native_log] = run("bf16", "RCL_REDUCED_GEMM=native");
  EXPECT_EQ(native.at("path"), "native");
  EXPECT_NE(native_log.find("bf16 GEMMs: native"), std::string::npos);
  const auto [device, device_log] = run("bf16", "env -u RCL_REDUCED_GEMM");
  EXPECT_EQ(device.at("requested"), "auto");
  EXPECT_FALSE(device.at("why").get<std::string>().empty());
  const auto [fp32, fp32_log] = run("fp32", "RCL_REDUCED_GEMM=float32");
  EXPECT_EQ(fp32.at("path"), "native");
  EXPECT_EQ(fp32_log.find("GEMMs:"), std::string::npos);
  const auto refused = run_cli(kSmokeCpu + "--steps 1 --output-dir " + dir.string() + "-typo", "RCL_REDUCED_GEMM=fast");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("invalid RCL_REDUCED_GEMM='fast'"), std::string::npos) << refused.err;
  std::filesystem::remove_all(dir);
}

TEST(Cli, BadInputExitsTwoWithOneLineNamingTheValue) {
  struct Case {
    std::string args, needle;
  };
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

// The parts acting at `point` in --explain-step's text: the "->" line under it.
std::string acting_at(const std::string& text, const std::string& point) {
  const auto at = text.find("\n  " + point + ": ");
  if (at == std::string::npos) return "(no point " + point + ")";
  const auto arrow = text.find("-> ", at);
  return text.substr(arrow + 3, text.find('\n', arrow) - arrow - 3);
}

// --explain-step: the resolved run's step top to bottom, each check at the points its code acts
// (read from its class), in the order the trainer calls them; nothing written, bad input refused.
TEST(Cli, ExplainStepShowsWhereEachCheckActsAndWritesNothing) {
  const auto dir = rcl::testing::fresh_dir("config", "explain-step");
  std::filesystem::remove_all(dir);
  const auto all = run_cli("--device cpu --stress all --explain-step --output-dir " + dir.string());
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  // The rng mode's rewind-and-replay re-drives the loop between steps, never inside one.
  EXPECT_NE(acting_at(all.out, "between_steps").find("replay"), std::string::npos) << all.out;
  EXPECT_EQ(acting_at(all.out, "before_forward").find("replay"), std::string::npos) << all.out;
  // Non-finite gradients are localised before the optimizer spreads them; the injector is idle.
  EXPECT_NE(acting_at(all.out, "on_gradients").find("nonfinite_localisation"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("fault_injector (idle: no --inject)"), std::string::npos) << all.out;
  // Observers hear the published step in the wiring's order: the outputs, then the checks, the watchdog last.
  const std::string published = acting_at(all.out, "on_step");
  EXPECT_EQ(published.rfind("run_summary, metrics", 0), 0u) << published;
  EXPECT_LT(published.find("console"), published.find("numerics")) << published;
  EXPECT_EQ(published.substr(published.rfind(", ") + 2), "watchdog") << published;
  // Unstressed: no replay; an injected fault strikes first wherever it acts.
  const auto plain = run_cli("--device cpu --explain-step --inject nan@step=3");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("replay"), std::string::npos) << plain.out;
  EXPECT_EQ(acting_at(plain.out, "on_gradients").rfind("fault_injector, ", 0), 0u) << plain.out;
  EXPECT_EQ(plain.out.find("(idle"), std::string::npos) << plain.out;
  const auto bad = run_cli("--device cpu --explain-step --stress bogus");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(bad.out.empty()) << bad.out;
}

// A composition the posed device cannot hold: refused before anything runs, one line with the
// predicted and available bytes, no output directory; --print-config shows the fit and refuses.
TEST(Cli, ACompositionThatDoesNotFitTheDeviceIsRefusedBeforeAnythingIsWritten) {
  const auto dir = rcl::testing::fresh_dir("config", "unfit");
  std::filesystem::remove_all(dir);
  const std::string unfit = "--preset small --stress gemm,memory,fusion --device-memory 8GB";
  const auto r = run_cli(unfit + " --steps 1 --output-dir " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("does not fit the device: predicted peak "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("> available 7200000000 bytes"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  const auto shown = run_cli(unfit + " --print-config");
  EXPECT_EQ(shown.exit_code, 2);
  const auto doc = nlohmann::json::parse(shown.out);
  EXPECT_FALSE(doc.at("fit").at("fits").get<bool>());
  EXPECT_GT(doc.at("fit").at("predicted").at("peak_bytes").get<int64_t>(), 7200000000);
  // The same composition on a posed device of 80% its predicted peak (which depends on the
  // libtorch: 2.x sends the memory mode's long sequences through fused attention) fits once the
  // micro-batch is smaller; whole blocks recomputed from the start, so that is the fit's one step.
  const std::string whole_blocks = "--preset small --stress gemm,memory,fusion --set checkpoint_keep_attention=false";
  const auto unconstrained =
      nlohmann::json::parse(run_cli(whole_blocks + " --device-memory 1000TB --print-config").out);
  const int64_t peak = unconstrained.at("fit").at("predicted_before_fit").at("peak_bytes").get<int64_t>();
  const auto fitted = run_cli(whole_blocks + " --device-memory " + std::to_string(peak * 8 / 10) + " --explain-stress");
  EXPECT_EQ(fitted.exit_code, 0) << fitted.err;
  EXPECT_NE(fitted.out.find("fit     batch_size"), std::string::npos) << fitted.out;
  EXPECT_NE(run_cli("--device-memory 80XB --print-config").err.find("invalid --device-memory '80XB'"),
            std::string::npos);
}

// A CPU run the host cannot hold (it used to start, fail to allocate, exit 3 and blame
// the ROCr allocator): refused as a GPU's is, before anything is written.
TEST(Cli, ACpuRunTheHostCannotHoldIsRefusedBeforeAnythingIsWritten) {
  const auto dir = rcl::testing::fresh_dir("config", "host-unfit");
  const std::string unfit = "--device cpu --stress memory --set memory_pressure_bytes=100000000000000";
  const auto r = run_cli(unfit + " --output-dir " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("error: the configuration does not fit the host's memory: predicted peak 1000000"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("> available "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("memory_pressure_bytes"), std::string::npos) << "what to change: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  // --print-config shows the configuration, then refuses as the run would.
  const auto shown = run_cli(unfit + " --print-config");
  EXPECT_EQ(shown.exit_code, 2);
  EXPECT_TRUE(nlohmann::json::parse(shown.out).at("fit").is_null());
  EXPECT_NE(shown.err.find("does not fit the host's memory"), std::string::npos) << shown.err;
}

// An out-of-memory the prediction did not foresee (here an address-space limit of 2 GB under a
// 4 GB ballast) crashes the run as before, but its report blames the host, not a ROCm component.
TEST(Cli, ACpuRunsOutOfMemoryIsTheHostsFinding) {
  const auto dir = rcl::testing::fresh_dir("config", "host-oom");
  const auto r =
      run_cli(rcl::testing::kSmokeCpu + "--set memory_pressure_bytes=4000000000 --steps 2 --output-dir " + dir.string(),
              "ulimit -v 2000000;");
  if (r.exit_code == 2 && r.err.find("does not fit the host's memory") != std::string::npos)
    GTEST_SKIP() << "this host has less than 4 GB available: " << r.err;
  if (r.err.find("error while loading shared libraries") != std::string::npos)
    GTEST_SKIP() << "this build's libraries do not map under ulimit -v 2000000 (a CUDA wheel's): " << r.err;
  ASSERT_EQ(r.exit_code, 3) << r.err;
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  ASSERT_EQ(report.at("findings").size(), 1u) << report.at("findings").dump(1);
  const auto& f = report.at("findings")[0];
  EXPECT_EQ(f.at("signature"), "host_out_of_memory") << f.dump(1);
  EXPECT_EQ(f.at("component"), "host");
  EXPECT_EQ(f.at("classification"), "configuration");
  for (const auto& c : report.at("components")) EXPECT_EQ(c.at("status"), "NOT_RUN") << c;
  // It had passed the host check: the report's config records what it was checked against.
  const auto& host = report.at("config").at("host_memory");
  EXPECT_TRUE(host.at("fits").get<bool>()) << host;
  EXPECT_GT(host.at("needed_bytes").get<int64_t>(), int64_t{4'000'000'000});
  std::filesystem::remove_all(dir);
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

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
