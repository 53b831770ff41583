// The node under the job, in-process: GPU telemetry through ROCm SMI and amd-smi (against fake
// libraries the tests build: tests/fakes/, values scripted per call), the amdgpu kernel log (a
// recorded log through the same parser), `doctor` (crafted environments, a fake KFD topology and
// kernel command line), run levels and the rocm.* knobs. Through the binary:
// tests/binary/test_node.cpp. Nothing here has met a real AMD GPU: docs/telemetry.md and
// docs/doctor.md say what that leaves unproven.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
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

TelemetrySample sample(int64_t step, uint32_t count, std::vector<json> gpus) {
  return {.t_s = static_cast<double>(step), .step = step, .device_count = count, .gpus = std::move(gpus)};
}

json gpu(uint32_t index, uint64_t ce, uint64_t ue, uint32_t throttle, double temp = 50) {
  return {{"index", index},          {"responding", true},          {"ecc_correctable", ce},
          {"ecc_uncorrectable", ue}, {"throttle_status", throttle}, {"temperature_edge_c", temp}};
}

// The script both fake libraries serve in the scripted-findings tests: ECC counts rise after steps
// 20 (correctable) and 30 (uncorrectable); throttled (bit 2) in the samples after 20 and 30.
const char* kEccAndThrottleScript =
    "devices=2 ecc_ce=0 ecc_ue=0 throttle=0 temp_edge=50\n"
    "devices=2 ecc_ce=0 ecc_ue=0 throttle=0 temp_edge=61\n"
    "devices=2 ecc_ce=4 ecc_ue=0 throttle=4 temp_edge=95\n"
    "devices=2 ecc_ce=4 ecc_ue=1 throttle=4 temp_edge=97\n"
    "devices=2 ecc_ce=4 ecc_ue=1 throttle=0 temp_edge=70\n";

// Through the real dlopen path into a fake library, one SMI round per script line, then the
// tracker: the exact steps of the ECC increases and of the throttle episode.
void expect_scripted_findings(const SmiLibrary& smi) {
  ASSERT_TRUE(smi.status().available) << smi.status().reason;
  FindingLog log(find_signature);
  TelemetryTracker tracker(log, 0);
  for (int64_t step : {0, 10, 20, 30, 40}) {
    TelemetrySample s{.t_s = 0, .step = step, .device_count = smi.device_count(), .gpus = {}};
    for (uint32_t i = 0; i < s.device_count.value_or(0); ++i) s.gpus.push_back(smi.sample(i));
    tracker.add(s);
  }
  tracker.finish(45);
  std::map<std::string, std::vector<Finding>> by;
  for (const auto& f : log.snapshot()) by[f.signature].push_back(f);
  ASSERT_EQ(by["ecc_correctable_increase"].size(), 2u);  // one per GPU
  ASSERT_EQ(by["ecc_uncorrectable_increase"].size(), 2u);
  ASSERT_EQ(by["gpu_throttled"].size(), 2u);
  EXPECT_EQ(by.size(), 3u);
  const auto& ue = by["ecc_uncorrectable_increase"][0];
  EXPECT_EQ(ue.severity, Severity::fail);
  EXPECT_EQ(ue.component, component::hip_runtime);
  EXPECT_EQ(ue.step, 30);
  EXPECT_EQ(ue.evidence.at("previous"), 0);
  EXPECT_EQ(ue.evidence.at("now"), 1);
  EXPECT_EQ(by["ecc_correctable_increase"][0].severity, Severity::warn);
  EXPECT_EQ(by["ecc_correctable_increase"][0].step, 20);
  // Throttled in the samples after steps 20 and 30, lifted in the one after 40: steps 21..41.
  const auto& throttled = by["gpu_throttled"][0];
  EXPECT_EQ(throttled.severity, Severity::warn);
  EXPECT_EQ(throttled.step, 21);
  EXPECT_EQ(throttled.evidence.at("episodes").at(0).at("first_step"), 21);
  EXPECT_EQ(throttled.evidence.at("episodes").at(0).at("last_step"), 41);
  EXPECT_EQ(throttled.evidence.at("episodes").at(0).at("throttle_status"), 4);
  const json report = tracker.report();
  EXPECT_EQ(report.at("before").at(0).at("temperature_edge_c"), 50.0);
  EXPECT_EQ(report.at("after").at(0).at("temperature_edge_c"), 70.0);
  EXPECT_EQ(report.at("extremes").at("1").at("temperature_edge_c").at("max"), 97.0);
  EXPECT_EQ(report.at("after").at(1).at("gfx_clock_mhz"), 2100);
  EXPECT_EQ(report.at("after").at(1).at("mem_clock_mhz"), 1300);
  EXPECT_EQ(report.at("after").at(1).at("power_w"), 300.0);
  EXPECT_EQ(report.at("after").at(1).at("power_cap_w"), 750.0);
  EXPECT_EQ(report.at("after").at(1).at("vram_total_bytes"), uint64_t{64} << 30);
  EXPECT_EQ(report.at("after").at(1).at("busy_percent"), 90);
}

std::map<std::string, std::string> statuses(const std::vector<DoctorCheck>& checks) {
  std::map<std::string, std::string> out;
  for (const auto& c : checks) out[c.name] = c.status;
  return out;
}

RunConfig resolve_with(const std::function<void(CliOptions&)>& edit) {
  CliOptions o;
  o.device = "cpu";
  edit(o);
  return resolve_run_config(o, false);
}

TEST(Telemetry, FakeSmiEccIncreaseAndThrottleBecomeFindings) {
  RCL_REQUIRE_FAKE_SMI();
  const auto dir = node_dir("fake-smi");
#ifdef RCL_FAKE_SMI
  ::setenv("RCL_ROCM_SMI_LIBRARY", RCL_FAKE_SMI, 1);
#endif
  ::setenv("FAKE_RSMI_SCRIPT", write_file(dir / "script", kEccAndThrottleScript).c_str(), 1);
  expect_scripted_findings(kRocmSmi);
}

// The same script through amd-smi's entry points (processor handles per socket, degrees rather
// than millidegrees, violation flags as the throttle bits).
TEST(Telemetry, FakeAmdSmiEccIncreaseAndThrottleBecomeFindings) {
  const auto dir = node_dir("fake-amd-smi");
  ::setenv("RCL_AMD_SMI_LIBRARY", RCL_FAKE_AMD_SMI, 1);
  ::setenv("FAKE_AMDSMI_SCRIPT", write_file(dir / "script", kEccAndThrottleScript).c_str(), 1);
  expect_scripted_findings(kAmdSmi);
}

// amd-smi 24.x (ROCm 6.0-6.3) lays amdsmi_power_info_t out without the leading socket_power: the
// library's version picks the layout, and a Navi/MI200-style board reports only the average.
TEST(Telemetry, FakeAmdSmiOlderStructLayoutStillReadsPower) {
  const auto dir = node_dir("fake-amd-smi-24");
  ::setenv("RCL_AMD_SMI_LIBRARY", RCL_FAKE_AMD_SMI, 1);
  ::setenv("FAKE_AMDSMI_SCRIPT", write_file(dir / "script", "lib_major=24 devices=1 power_w=275 throttle=2\n").c_str(),
           1);
  ASSERT_TRUE(amd_smi_status().available) << amd_smi_status().reason;
  ASSERT_EQ(amd_smi_device_count(), 1u);
  const json gpu0 = amd_smi_sample(0);
  EXPECT_EQ(gpu0.at("power_w"), 275.0);
  EXPECT_EQ(gpu0.at("throttle_status"), 2);  // package power (PPT)
  EXPECT_TRUE(gpu0.at("responding").get<bool>());
  EXPECT_FALSE(amd_smi_sample(1).at("responding").get<bool>());  // no such GPU
}

TEST(Telemetry, GpuThatStopsAnsweringOrIsNoLongerListedFails) {
  FindingLog log(find_signature);
  TelemetryTracker tracker(log, 0);
  tracker.add(sample(0, 2, {gpu(0, 0, 0, 0), gpu(1, 0, 0, 0)}));
  tracker.add(sample(5, 2, {gpu(0, 0, 0, 0), {{"index", 1}, {"responding", false}}}));
  tracker.add(sample(9, 1, {gpu(0, 0, 0, 0)}));
  tracker.add(sample(12, 2, {gpu(0, 0, 0, 0), gpu(1, 0, 0, 0)}));
  const auto findings = log.snapshot();
  ASSERT_EQ(findings.size(), 1u);  // GPU 1, once
  EXPECT_EQ(findings[0].signature, "gpu_disappeared");
  EXPECT_EQ(findings[0].severity, Severity::fail);
  EXPECT_EQ(findings[0].step, 5);
  EXPECT_EQ(findings[0].evidence.at("gpu"), 1);

  FindingLog count_log(find_signature);
  TelemetryTracker count_tracker(count_log, 0);
  count_tracker.add(sample(0, 2, {gpu(0, 0, 0, 0), gpu(1, 0, 0, 0)}));
  count_tracker.add({.t_s = 1, .step = 3, .device_count = std::nullopt, .gpus = {}});
  EXPECT_EQ(count_log.snapshot().size(), 2u);  // the count query failed: both are gone
}

// Clean nodes (several seeds): temperatures, clocks and power move, counters stay: no finding.
TEST(Telemetry, CleanSamplesStaySilent) {
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> temp(35, 90);
    FindingLog log(find_signature);
    TelemetryTracker tracker(log, 0);
    for (int64_t step = 0; step < 200; step += 3)
      tracker.add(sample(step, 2, {gpu(0, 7, 0, 0, temp(rng)), gpu(1, 0, 2, 0, temp(rng))}));
    tracker.finish(200);
    EXPECT_TRUE(log.snapshot().empty()) << "seed " << seed << ": " << to_json(log.snapshot().front()).dump();
  }
}

TEST(KernelLog, RecordedAmdgpuLinesMapToSignatures) {
  std::ifstream in(kRecordedLog);
  std::vector<std::pair<std::string, Severity>> got;
  for (std::string line; std::getline(in, line);)
    if (const auto m = classify_kernel_line(line)) got.emplace_back(m->signature, m->severity);
  const std::vector<std::pair<std::string, Severity>> expected = {
      {"kernel_page_fault", Severity::fail}, {"kernel_ring_timeout", Severity::fail},
      {"kernel_gpu_reset", Severity::fail},  {"kernel_ras_event", Severity::warn},
      {"kernel_ras_event", Severity::fail},  {"kernel_xgmi_error", Severity::fail}};
  EXPECT_EQ(got, expected);  // the USB, NVMe, CPU page fault and SMU lines are not amdgpu failures
  const auto m = classify_kernel_line("6,4811,1021331400,-;amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->line, "amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!");  // the /dev/kmsg prefix is gone
}

TEST(Doctor, GoodCraftedEnvironmentHasNoWarningAboutTheNode) {
  const auto dir = node_dir("doctor-good");
  DoctorInputs in;
  in.kfd_topology = fake_topology(dir / "nodes", 2).string();
  in.cmdline_path = write_file(dir / "cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt amd_iommu=on\n").string();
  in.env = {{"MIOPEN_USER_DB_PATH", (dir / "miopen").string()},
            {"HSA_ENABLE_SDMA", "0"},
            {"HIP_VISIBLE_DEVICES", "0,1"},
            {"PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True"},
            {"NCCL_DEBUG", "WARN"}};
  const auto s = statuses(run_doctor(in));
  for (const char* name :
       {"libtorch", "visible_devices", "gpu_arch", "pytorch_rocm_arch", "allocator_conf", "blas_backend", "tunableop",
        "miopen", "hsa_enable_sdma", "debug_serialization", "rccl_env", "kernel_cmdline", "bf16_probe"})
    EXPECT_EQ(s.at(name), "pass") << name;
  EXPECT_EQ(kfd_gpu_archs(in.kfd_topology), (std::vector<std::string>{"gfx942", "gfx942"}));
}

TEST(Doctor, BadCraftedEnvironmentWarnsAndFailsWithSuggestions) {
  const auto dir = node_dir("doctor-bad");
  DoctorInputs in;
  in.kfd_topology = fake_topology(dir / "nodes", 4).string();
  in.cmdline_path = write_file(dir / "cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n").string();
  in.env = {{"HIP_VISIBLE_DEVICES", "0"},          {"CUDA_VISIBLE_DEVICES", "1"},
            {"HSA_OVERRIDE_GFX_VERSION", "9.4.2"}, {"PYTORCH_HIP_ALLOC_CONF", "expandable_segment:True"},
            {"AMD_SERIALIZE_KERNEL", "3"},         {"RCCL_MSCCLPP_ENABLE", "1"},
            {"PYTORCH_TUNABLEOP_ENABLED", "1"},    {"MIOPEN_FIND_MODE", "SLOW"},
            {"PYTORCH_ROCM_ARCH", "gfx90a"}};
  const auto checks = run_doctor(in);
  const auto s = statuses(checks);
  EXPECT_EQ(s.at("visible_devices"), "warn");
  EXPECT_EQ(s.at("gpu_arch"), "warn");
  EXPECT_EQ(s.at("pytorch_rocm_arch"), "warn");
  EXPECT_EQ(s.at("allocator_conf"), "fail");
  EXPECT_EQ(s.at("debug_serialization"), "warn");
  EXPECT_EQ(s.at("rccl_env"), "warn");
  EXPECT_EQ(s.at("tunableop"), "warn");
  EXPECT_EQ(s.at("miopen"), "warn");
  EXPECT_EQ(s.at("kernel_cmdline"), "warn");
  for (const auto& c : checks)
    if (c.status != "pass") EXPECT_FALSE(c.suggestion.empty()) << c.name;
  const json j = doctor_to_json(checks);
  EXPECT_EQ(j.at("status"), "fail");
  EXPECT_EQ(j.at("counts").at("fail").get<int>() + j.at("counts").at("warn").get<int>() +
                j.at("counts").at("pass").get<int>(),
            static_cast<int>(checks.size()));
}

// On a GPU the probes would make the first device allocation, where libtorch throws on a
// refused allocator configuration (the GPU run's doctor died of SIGSEGV there): not run, said why.
TEST(Doctor, RefusedAllocatorConfigurationKeepsTheProbesOffTheDevice) {
  DoctorInputs in;
  in.device = torch::Device(torch::kCUDA, 0);  // never touched: this host may have no GPU
  in.env = {{"PYTORCH_HIP_ALLOC_CONF", "bogus:1"}};
  const auto checks = run_doctor(in);
  const auto s = statuses(checks);
  EXPECT_EQ(s.at("allocator_conf"), "fail");
  for (const auto& c : checks)
    if (c.name == "fp16_probe" || c.name == "bf16_probe") {
      EXPECT_EQ(c.status, "warn") << c.name;
      EXPECT_NE(c.value.find("not run"), std::string::npos) << c.value;
      EXPECT_EQ(c.suggestion, "fix allocator_conf, then run doctor again");
    }
}

TEST(RunLevels, EachLevelResolvesToItsDocumentedBundle) {
  const std::map<int, std::tuple<double, std::vector<std::string>, int64_t, double>> expected = {
      {1, {120.0, {}, 25, 2.0}},
      {2, {900.0, {"gemm", "rng", "comm"}, 100, 5.0}},
      {3, {3600.0, stress_mode_names(), 200, 10.0}},
      {4, {28800.0, stress_mode_names(), 500, 30.0}}};
  for (const auto& [level, want] : expected) {
    const auto run = resolve_with([&](CliOptions& o) { o.level = level; });
    const auto& [duration, modes, canary, telemetry] = want;
    EXPECT_EQ(run.level, level);
    EXPECT_EQ(run.preset, "smoke") << level;  // the device's default
    EXPECT_EQ(run.base.max_duration_s, duration) << level;
    EXPECT_GE(run.base.steps, 1'000'000) << level;  // time ends the run
    EXPECT_EQ(std::set<std::string>(run.stress_modes.begin(), run.stress_modes.end()),
              std::set<std::string>(modes.begin(), modes.end()))
        << level;
    EXPECT_EQ(run.diagnostics.gemm_canary_interval, canary) << level;
    EXPECT_EQ(run.diagnostics.telemetry_interval_s, telemetry) << level;
  }
  // Explicit flags and keys win over the level.
  const auto run = resolve_with([](CliOptions& o) {
    o.level = 4;
    o.steps = 7;
    o.stress = "gemm";
    o.preset = "cpu-medium";
    o.overrides = {"diagnostics.gemm_canary_interval=3", "max_duration_s=0"};
  });
  EXPECT_EQ(run.base.steps, 7);
  EXPECT_EQ(run.base.max_duration_s, 0.0);
  EXPECT_EQ(run.stress_modes, std::vector<std::string>{"gemm"});
  EXPECT_EQ(run.preset, "cpu-medium");
  EXPECT_EQ(run.diagnostics.gemm_canary_interval, 3);
  EXPECT_EQ(run.diagnostics.telemetry_interval_s, 30.0);  // what was not overridden stays the level's
}

TEST(RocmKnobs, DefaultLeavesTheEnvironmentAndASetKnobWins) {
  ::setenv("TORCH_BLAS_PREFER_HIPBLASLT", "1", 1);
  ::unsetenv("HSA_ENABLE_SDMA");
  ::unsetenv("PYTORCH_HIP_ALLOC_CONF");
  RocmConfig rocm;
  json record = apply_rocm_knobs(rocm, "");
  EXPECT_STREQ(std::getenv("TORCH_BLAS_PREFER_HIPBLASLT"), "1");
  EXPECT_EQ(record.at("TORCH_BLAS_PREFER_HIPBLASLT").at("source"), "environment");
  EXPECT_EQ(std::getenv("HSA_ENABLE_SDMA"), nullptr);

  rocm.blas_backend = BlasBackend::rocblas;
  rocm.hsa_enable_sdma = KnobSwitch::off;
  rocm.expandable_segments = KnobBool::yes;
  rocm.max_split_size_mb = 256;
  rocm.miopen_user_db = "per-run";
  record = apply_rocm_knobs(rocm, "/tmp/run-x");
  EXPECT_STREQ(std::getenv("TORCH_BLAS_PREFER_HIPBLASLT"), "0");
  EXPECT_EQ(record.at("TORCH_BLAS_PREFER_HIPBLASLT").at("replaced"), "1");
  EXPECT_STREQ(std::getenv("HSA_ENABLE_SDMA"), "0");
  EXPECT_STREQ(std::getenv("PYTORCH_HIP_ALLOC_CONF"), "expandable_segments:True,max_split_size_mb:256");
  EXPECT_STREQ(std::getenv("MIOPEN_USER_DB_PATH"), "/tmp/run-x/miopen-user-db");
  // Applying again (the runner after main) judges the environment as it was at start.
  EXPECT_EQ(apply_rocm_knobs(rocm, "/tmp/run-x"), record);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
