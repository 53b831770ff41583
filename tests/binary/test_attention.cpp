// Attention through the binary: a backend the device cannot serve is refused (exit 2), the
// `probe attention` subcommand's JSON and exit codes, the kernel a training call runs on, and the
// attention stress mode end to end. In-process: tests/unit/test_attention_backends.cpp. SDPA
// exists from libtorch 2.0: the tests that need it skip on 1.13 only, saying so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <tuple>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using rcl::testing::read_text;
using rcl::testing::run_cli;

#define RCL_REQUIRE_SDPA() \
  if (!sdpa_available()) GTEST_SKIP() << "needs at::scaled_dot_product_attention (libtorch >= 2.0)"

fs::path temp_dir(const std::string& name) {
  return fs::temp_directory_path() / ("rcl-attn-" + std::to_string(::getpid()) + "-" + name);
}

// Refused at config time by the binary: exit 2, one line, nothing written.
TEST(AttentionBackends, BinaryRefusesAnUnservableBackendWithExitTwo) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-attn-refused-" + std::to_string(::getpid()));
  const auto r = run_cli(
      "--preset smoke --device cpu --steps 1 --set attention_backend=sdpa_mem_efficient "
      "--output-dir " +
      dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("invalid attention_backend='sdpa_mem_efficient'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  EXPECT_FALSE(fs::exists(dir));
  // Checked on the composed config: the rng mode's dropout, which a CPU's flash kernel does not take
  // (on 1.13 the backend itself is refused).
  const auto flash = run_cli("--preset smoke --device cpu --steps 1 --stress rng --set attention_backend=sdpa_flash "
                             "--output-dir " + dir.string());
  EXPECT_EQ(flash.exit_code, 2) << flash.err;
  EXPECT_NE(flash.err.find(sdpa_available() ? "takes no dropout" : "needs libtorch >= 2.0"), std::string::npos)
      << flash.err;
  const size_t error_line = flash.err.find("error: invalid attention_backend='sdpa_flash'");
  ASSERT_NE(error_line, std::string::npos) << flash.err;
  EXPECT_EQ(flash.err.find('\n', error_line), flash.err.size() - 1) << flash.err;  // the last line, one line
  EXPECT_FALSE(fs::exists(dir));
}

TEST(ProbeCommand, PrintsJsonAndExitsZeroCleanOneOnAMismatchTwoOnBadInput) {
  const std::string common =
      "probe attention --preset smoke --device cpu --set num_threads=1 "
      "--set attention_probe_seq_len=128";
  const auto clean = run_cli(common);
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  const auto report = nlohmann::json::parse(clean.out);
  EXPECT_EQ(report.at("probe"), "attention");
  EXPECT_EQ(report.at("seq_len"), 128);
  EXPECT_EQ(report.at("mismatches"), 0);
  EXPECT_TRUE(report.at("passed").get<bool>());
  EXPECT_EQ(report.at("backends").size(), attention_probe_backends().size());
  EXPECT_EQ(report.at("results").size(), attention_probe_backends().size() * 12);
  // The smoke preset trains in fp32: on SDPA's CPU flash kernel from libtorch 2.0, else the explicit path.
  EXPECT_EQ(report.at("training_kernel"), sdpa_available() ? "flash" : "explicit");

  const auto broken = run_cli(common + " --inject attention-mask-corrupt");
  ASSERT_EQ(broken.exit_code, 1) << broken.err;
  const auto bad = nlohmann::json::parse(broken.out);
  EXPECT_FALSE(bad.at("passed").get<bool>());
  for (const auto& r : bad.at("results"))
    if (!r.at("passed").get<bool>()) EXPECT_TRUE(r.at("masked").get<bool>()) << r.dump();

  for (const std::string args :
       {"probe", "probe gemm", "probe attention --set attention_probe_seq_len=-1", "probe attention --no-such-flag"}) {
    const auto usage = run_cli(args);
    EXPECT_EQ(usage.exit_code, 2) << args << ": " << usage.err;
    EXPECT_NE(usage.err.find("error:"), std::string::npos) << args;
  }
}

// The kernel a training call runs on, as libtorch's dispatcher picks it: a pinned backend is
// obeyed (what the run validates and pays for), and the probe reports the training call's.
TEST(SdpaKernelChoice, FollowsTheEnabledKernelsAndTheProbeReportsTheTrainingCalls) {
  RCL_REQUIRE_SDPA();
  const auto x = torch::randn({2, 2, 16, 8});
  const auto mask = padded_causal_mask(2, 16, 0.25, torch::Device(torch::kCPU));
  {
    SdpaBackendScope math("sdpa_math");
    EXPECT_EQ(sdpa_kernel_choice(x, x, x, mask, 0.0), "math");
    EXPECT_EQ(sdpa_kernel_choice(x, x, x, torch::Tensor(), 0.0), "math");
  }
  {
    SdpaBackendScope flash("sdpa_flash");  // CPU flash takes fp32 and masks
    EXPECT_EQ(sdpa_kernel_choice(x, x, x, mask, 0.0), "flash");
  }
  const std::string probe =
      "probe attention --preset smoke --device cpu --set num_threads=1 "
      "--set attention_probe_seq_len=64 --set attention_backend=";
  for (const auto& [backend, kernel] : {std::pair{"sdpa_math", "math"}, std::pair{"sdpa_flash", "flash"}}) {
    const auto r = run_cli(probe + backend);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("training_kernel"), kernel) << backend;
  }
  // The fusion mode's Q/K/V convolution runs over channels first; its output must reach the
  // attention with unit-stride heads, or no fused kernel takes it and the math path's T x T
  // scores run (out of memory at seq 8192 on an H200).
  const auto conv = run_cli(probe + "sdpa --set qkv_conv_kernel=3");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  EXPECT_EQ(nlohmann::json::parse(conv.out).at("training_kernel"), "flash");
}

// The mode end to end through the binary: trains (padded, strided V, fused SDPA) and probes at
// start-up and every 3 steps, clean; on 1.13 it is skipped and said so.
TEST(AttentionStressMode, SmokeRunTrainsThroughTheFusedPathAndProbesClean) {
  const fs::path dir = temp_dir("mode");
  fs::remove_all(dir);
  const auto r = run_cli(
      "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 --steps 6 "
      "--stress attention --set stress_profile.attention.probe_interval=3 --output-dir " +
      dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto config = nlohmann::json::parse(read_text(dir / "config.json"));
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  fs::remove_all(dir);
  EXPECT_EQ(report.at("verdict"), "PASS");
  const std::string log = r.out + r.err;
  if (!sdpa_available()) {
    EXPECT_TRUE(config.at("stress_skipped").contains("attention")) << config.dump();
    EXPECT_NE(log.find("stress mode attention skipped"), std::string::npos) << log;
    return;
  }
  EXPECT_EQ(config.at("training").at("attention_backend"), "sdpa");
  for (const char* step : {"step 0:", "step 3:", "step 6:"})
    EXPECT_NE(log.find(std::string("attention probe at ") + step), std::string::npos) << step << "\n" << log;
  EXPECT_NE(log.find("0 outside their bound"), std::string::npos) << log;
  EXPECT_EQ(log.find("attention_backend_mismatch"), std::string::npos) << log;
  EXPECT_EQ(report.at("attention_kernel").at("training_kernel"), "flash") << report.dump();
}

// A run that calls SDPA records, from its start, which kernel the dispatcher gives its training
// call (config.json and report.json's `attention_kernel`); one on the explicit path records none.
// With the Q/K/V convolution on, the kernel is the fused one, not the math fallback.
TEST(AttentionKernelRecord, ARunCallingSdpaRecordsItsTrainingKernelFromTheStart) {
  RCL_REQUIRE_SDPA();
  const std::string run = "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 --steps 1 ";
  for (const auto& [backend, kernel] : {std::pair{"sdpa", "flash"}, std::pair{"sdpa_math", "math"}}) {
    const fs::path dir = temp_dir(std::string("kernel-") + backend);
    fs::remove_all(dir);
    const auto r =
        run_cli(run + "--set qkv_conv_kernel=3 --set attention_backend=" + backend + " --output-dir " + dir.string());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto config = nlohmann::json::parse(read_text(dir / "config.json"));
    const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
    fs::remove_all(dir);
    EXPECT_EQ(config.at("attention_kernel").at("training_kernel"), kernel) << backend;
    EXPECT_EQ(config.at("attention_kernel").at("attention_backend"), backend);
    EXPECT_EQ(report.at("attention_kernel"), config.at("attention_kernel"));
  }
  // The CPU's `auto` (config.json says what was asked and what runs): SDPA in fp32, its flash
  // kernel; the explicit path in bf16, where SDPA's CPU kernel is the slower one. Asked for, the
  // explicit path. The explicit path records no SDPA kernel.
  for (const auto& [requested, precision, backend] :
       {std::tuple{"auto", "fp32", "sdpa"}, std::tuple{"auto", "bf16", "math"}, std::tuple{"math", "fp32", "math"}}) {
    const std::string label = std::string(requested) + "-" + precision;
    const fs::path dir = temp_dir("kernel-" + label);
    fs::remove_all(dir);
    const auto r = run_cli(run + "--set attention_backend=" + requested + " --set mixed_precision=" + precision +
                           " --output-dir " + dir.string());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto config = nlohmann::json::parse(read_text(dir / "config.json"));
    fs::remove_all(dir);
    EXPECT_EQ(config.at("training").at("attention_backend"), backend) << label;
    EXPECT_EQ(config.at("attention_backend_requested"), requested) << label;
    if (std::string(backend) == "math") EXPECT_FALSE(config.contains("attention_kernel")) << label << config.dump();
    else EXPECT_EQ(config.at("attention_kernel").at("training_kernel"), "flash") << label << config.dump();
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
