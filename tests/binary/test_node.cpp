// The node under the job through the binary: telemetry from the fake SMI libraries
// (tests/fakes/) into telemetry.jsonl, metrics.jsonl and the report, the amdgpu kernel log read
// by a run, the `doctor` subcommand, run levels in --print-config, the rocm.* knobs reaching the
// environment before libtorch starts, and --memory-profile. In-process:
// tests/unit/test_node_checks.cpp. Nothing here has met a real AMD GPU: docs/telemetry.md and
// docs/doctor.md say what that leaves unproven.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/monitors/kernel_log.hpp"
#include "rocm_conformance_llm/checks/monitors/telemetry.hpp"
#include "rocm_conformance_llm/platform/doctor.hpp"
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"
#include "rocm_conformance_llm/platform/rocm_knobs.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "support/cli_runner.hpp"
#include "support/node_fixtures.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using namespace rcl::testing;  // run_cli, read_text
namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kSmoke = "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 --steps 20 ";

std::vector<json> findings_named(const json& report, const std::string& prefix) {
  std::vector<json> out;
  for (const auto& f : report.at("findings"))
    if (f.at("signature").get<std::string>().rfind(prefix, 0) == 0) out.push_back(f);
  return out;
}

// The binary with the fake library: telemetry.jsonl, report.json's telemetry and the findings;
// rsmi_init's drm complaint never reaches the console; the doctor and the knobs in config.json.
TEST(Telemetry, RunWithFakeSmiWritesTelemetryAndFindsTheInjectedEvents) {
  RCL_REQUIRE_FAKE_SMI();
  const auto dir = node_dir("run-faulty");
  // Two clean rounds: the environment report in config.json reads the first.
  const auto script = write_file(dir / "script",
                                 "devices=1 ecc_ce=0 ecc_ue=0 throttle=0\n"
                                 "devices=1 ecc_ce=0 ecc_ue=0 throttle=0\n"
                                 "devices=1 ecc_ce=2 ecc_ue=1 throttle=4\n");
  const auto r = run_cli(kSmoke + "--set diagnostics.telemetry_interval_s=0.05 --output-dir " + (dir / "out").string(),
                         fake_smi_env(script));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("Failed to open drm"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("Failed to open drm"), std::string::npos);
  const json report = json::parse(read_text(dir / "out/report.json"));
  const json& telemetry = report.at("telemetry");
  EXPECT_TRUE(telemetry.at("available").get<bool>());
  EXPECT_GE(telemetry.at("samples").get<int>(), 2);
  EXPECT_EQ(telemetry.at("before").at(0).at("ecc_uncorrectable"), 0);
  EXPECT_EQ(telemetry.at("after").at(0).at("ecc_uncorrectable"), 1);
  EXPECT_EQ(findings_named(report, "ecc_uncorrectable_increase").size(), 1u);
  EXPECT_EQ(findings_named(report, "ecc_correctable_increase").size(), 1u);
  const auto throttled = findings_named(report, "gpu_throttled");
  ASSERT_EQ(throttled.size(), 1u);
  EXPECT_EQ(throttled[0].at("evidence").at("episodes").at(0).at("last_step"), 20);  // lasted to the end
  std::ifstream jsonl(dir / "out/telemetry.jsonl");
  int lines = 0;
  for (std::string line; std::getline(jsonl, line); ++lines) EXPECT_TRUE(json::parse(line).contains("gpus"));
  EXPECT_EQ(lines, telemetry.at("samples").get<int>());
}

TEST(Telemetry, CleanRunWithFakeSmiHasNoTelemetryFinding) {
  RCL_REQUIRE_FAKE_SMI();
  for (const char* seed : {"1", "2"}) {
    const auto dir = node_dir(std::string("run-clean-") + seed);
    const auto script =
        write_file(dir / "script", "devices=2 ecc_ce=3 temp_edge=50\ndevices=2 ecc_ce=3 temp_edge=80\n");
    const auto r = run_cli(kSmoke + "--seed " + seed + " --set diagnostics.telemetry_interval_s=0.05 --output-dir " +
                               (dir / "out").string(),
                           fake_smi_env(script));
    const json report = json::parse(read_text(dir / "out/report.json"));
    for (const char* sig : {"ecc_", "gpu_"}) EXPECT_TRUE(findings_named(report, sig).empty()) << r.err;
    EXPECT_EQ(report.at("telemetry").at("device_count_after"), 2);
  }
}

TEST(Telemetry, LibraryAbsentIsALoggedSkip) {
  const auto dir = node_dir("absent");
  const auto r = run_cli(kSmoke + "--output-dir " + (dir / "out").string(),
                         "RCL_ROCM_SMI_LIBRARY=" + (dir / "no-such-librocm_smi64.so").string() +
                             " RCL_AMD_SMI_LIBRARY=" + (dir / "no-such-libamd_smi.so").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("GPU telemetry skipped"), std::string::npos) << r.err;
  const json report = json::parse(read_text(dir / "out/report.json"));
  const json& telemetry = report.at("telemetry");
  EXPECT_FALSE(telemetry.at("available").get<bool>());
  const auto reason = telemetry.at("reason").get<std::string>();
  EXPECT_NE(reason.find("no-such-libamd_smi.so not found"), std::string::npos) << reason;
#ifdef RCL_FAKE_SMI
  EXPECT_NE(reason.find("no-such-librocm_smi64.so not found"), std::string::npos) << reason;
#else  // the ROCm SMI fallback is compiled only with its header (not on the GPU machine's build)
  EXPECT_NE(reason.find("built without ROCm SMI headers"), std::string::npos) << reason;
#endif
  EXPECT_FALSE(fs::exists(dir / "out/telemetry.jsonl"));
  // No telemetry: the step lines carry none.
  std::ifstream metrics(dir / "out/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) EXPECT_FALSE(json::parse(line).contains("telemetry"));
}

// Both libraries there: amd-smi is read (its script says 77 C, ROCm SMI's 55 C), and each step
// line of metrics.jsonl carries the latest sample in brief, exactly as telemetry.jsonl has it.
// amd-smi absent: ROCm SMI is the fallback.
TEST(Telemetry, AmdSmiIsPreferredRocmSmiIsTheFallbackAndStepsCarryTheLatestSample) {
  RCL_REQUIRE_FAKE_SMI();
  const auto dir = node_dir("prefer");
  const auto amd = write_file(dir / "amd", "devices=1 temp_edge=77 throttle=4\n");
  const auto rocm = write_file(dir / "rocm", "devices=1 temp_edge=55\n");
  const std::string run = kSmoke + "--set diagnostics.telemetry_interval_s=0.05 --output-dir ";
#ifdef RCL_FAKE_SMI
  const std::string rocm_env =
      std::string("RCL_ROCM_SMI_LIBRARY=") + RCL_FAKE_SMI + " FAKE_RSMI_SCRIPT=" + rocm.string();
#else
  const std::string rocm_env;
#endif
  auto r = run_cli(run + (dir / "both").string(), fake_amd_smi_env(amd) + " " + rocm_env);
  EXPECT_EQ(r.exit_code, 0) << r.err;  // throttling is a warning
  EXPECT_EQ(r.err.find("Failed to open drm"), std::string::npos) << r.err;
  json report = json::parse(read_text(dir / "both/report.json"));
  EXPECT_EQ(report.at("telemetry").at("interface"), "amd-smi");
  EXPECT_EQ(report.at("telemetry").at("library"), RCL_FAKE_AMD_SMI);
  EXPECT_EQ(report.at("telemetry").at("after").at(0).at("temperature_edge_c"), 77.0);
  EXPECT_EQ(findings_named(report, "gpu_throttled").size(), 1u);

  std::map<double, json> samples;  // telemetry.jsonl by t_s
  std::ifstream jsonl(dir / "both/telemetry.jsonl");
  for (std::string line; std::getline(jsonl, line);) {
    const json s = json::parse(line);
    samples[s.at("t_s").get<double>()] = s;
  }
  std::ifstream metrics(dir / "both/metrics.jsonl");
  int steps = 0;
  double last_t = -1;
  for (std::string line; std::getline(metrics, line); ++steps) {
    const json step = json::parse(line);
    ASSERT_TRUE(step.contains("telemetry")) << line;  // the "before" sample precedes step 1
    const json& brief = step.at("telemetry");
    const double t = brief.at("t_s").get<double>();
    ASSERT_TRUE(samples.count(t)) << "not a telemetry.jsonl sample: " << brief.dump();
    EXPECT_GE(t, last_t);
    last_t = t;
    EXPECT_LT(brief.at("step").get<int64_t>(), step.at("step").get<int64_t>());
    const json& gpu = brief.at("gpus").at(0);
    const json& full = samples[t].at("gpus").at(0);
    for (const char* key : {"temperature_edge_c", "power_w", "gfx_clock_mhz", "mem_clock_mhz", "throttle_status"})
      EXPECT_EQ(gpu.at(key), full.at(key)) << key;
    EXPECT_EQ(gpu.at("throttle_status"), 4);
    EXPECT_FALSE(gpu.contains("ecc_correctable"));  // the counters stay in telemetry.jsonl
  }
  EXPECT_EQ(steps, 20);

  r = run_cli(run + (dir / "fallback").string(), kNoAmdSmi + " " + rocm_env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  report = json::parse(read_text(dir / "fallback/report.json"));
  EXPECT_EQ(report.at("telemetry").at("interface"), "rocm-smi");
  EXPECT_EQ(report.at("telemetry").at("after").at(0).at("temperature_edge_c"), 55.0);
  const json config = json::parse(read_text(dir / "fallback/config.json"));
  EXPECT_NE(config.dump().find("\"amd_smi\""), std::string::npos);  // the environment report names both
}

TEST(KernelLog, RunReadsTheRecordedLogAndUnreadableIsASkip) {
  const auto dir = node_dir("klog");
  auto r = run_cli(kSmoke + "--set diagnostics.kernel_log_source=" + kRecordedLog.string() + " --output-dir " +
                   (dir / "a").string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  json report = json::parse(read_text(dir / "a/report.json"));
  EXPECT_EQ(findings_named(report, "kernel_").size(), 6u);
  EXPECT_EQ(findings_named(report, "kernel_gpu_reset").at(0).at("evidence").at("line"),
            "[ 1021.412901] amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!");
  EXPECT_EQ(report.at("kernel_log").at("matches"), 6);

  const auto opened = open_kernel_log((dir / "missing.log").string());
  EXPECT_FALSE(opened.source);
  EXPECT_EQ(opened.description.rfind("skipped", 0), 0u);
  r = run_cli(kSmoke + "--set diagnostics.kernel_log_source=" + (dir / "missing.log").string() + " --output-dir " +
              (dir / "b").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kernel log skipped"), std::string::npos) << r.err;
}

TEST(Doctor, SubcommandPrintsLinesAndJsonAndExitsOneOnAFailure) {
  const auto dir = node_dir("doctor-cli");
  const std::string where = " --proc-cmdline " + write_file(dir / "cmdline", "ro quiet\n").string() +
                            " --kfd-topology " + fake_topology(dir / "nodes", 2).string();
  auto r = run_cli("doctor" + where, "MIOPEN_USER_DB_PATH=" + (dir / "db").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PASS  gpu_arch             2 GPU(s): gfx942"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WARN  kernel_cmdline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-> multi-GPU runs hang in RCCL without iommu=pt"), std::string::npos) << r.out;
  r = run_cli("doctor --json" + where, "PYTORCH_HIP_ALLOC_CONF=bogus:1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("status"), "fail");
}

TEST(RunLevels, PrintConfigShowsTheLevelAndBadLevelsAreUsageErrors) {
  auto r = run_cli("--device cpu --level 2 --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json config = json::parse(r.out);
  EXPECT_EQ(config.at("level"), 2);
  EXPECT_EQ(config.at("training").at("max_duration_s"), 900.0);
  r = run_cli("--device cpu --level 5 --print-config");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("invalid --level 5: allowed levels are 1 (quick)"), std::string::npos) << r.err;
}

// main applies the knobs before its first HIP call; the doctor runs right there, so it sees them.
// A run records them in config.json, and --memory-profile's figures land in report.json.
TEST(RocmKnobs, KnobReachesTheEnvironmentBeforeLibtorchStartsAndIsRecorded) {
  const auto dir = node_dir("knobs");
  auto r = run_cli("--set rocm.hsa_enable_sdma=off doctor --json --proc-cmdline /nonexistent", "HSA_ENABLE_SDMA=1");
  const json doctor = json::parse(r.out);
  for (const auto& c : doctor.at("checks"))
    if (c.at("name") == "hsa_enable_sdma") EXPECT_EQ(c.at("value").get<std::string>().substr(0, 1), "0");

  r = run_cli(kSmoke +
                  "--memory-profile --set rocm.blas_backend=rocblas --set rocm.miopen_user_db=per-run "
                  "--set rocm.garbage_collection_threshold=0.6 --output-dir " +
                  (dir / "out").string(),
              "TORCH_BLAS_PREFER_HIPBLASLT=1 PYTORCH_TUNABLEOP_ENABLED=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json config = json::parse(read_text(dir / "out/config.json"));
  const json& env = config.at("environment").at("env");
  EXPECT_EQ(env.at("TORCH_BLAS_PREFER_HIPBLASLT"), "0");
  EXPECT_EQ(env.at("PYTORCH_TUNABLEOP_ENABLED"), "1");  // the config left it alone
  EXPECT_EQ(env.at("PYTORCH_HIP_ALLOC_CONF"), "garbage_collection_threshold:0.6");
  EXPECT_EQ(env.at("MIOPEN_USER_DB_PATH"), fs::absolute(dir / "out/miopen-user-db").string());
  EXPECT_EQ(config.at("rocm_knobs").at("TORCH_BLAS_PREFER_HIPBLASLT").at("replaced"), "1");
  EXPECT_EQ(config.at("rocm").at("blas_backend"), "rocblas");
  EXPECT_TRUE(config.at("doctor").at("checks").is_array());
  EXPECT_EQ(config.at("doctor").at("checks").at(0).at("name"), "libtorch");

  const json profile = json::parse(read_text(dir / "out/report.json")).at("memory_profile");
  for (const char* point : {"after_model_creation", "after_to_device", "after_first_step"})
    EXPECT_GT(profile.at(point).at("rss_bytes").get<int64_t>(), 0) << point;
  EXPECT_GE(profile.at("peak").at("step").get<int64_t>(), 1);
  EXPECT_GE(profile.at("peak").at("bytes").get<int64_t>(),
            profile.at("after_first_step").at("rss_bytes").get<int64_t>());
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
