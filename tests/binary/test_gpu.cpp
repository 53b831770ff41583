// GPU runs through the binary: fused attention against float64 math, bf16/fp16 training, the
// GEMM canary on the device. They run where libtorch sees a GPU (torch::kCUDA is the HIP device
// on ROCm) and skip, saying so, elsewhere; scripts/gpu/run.sh runs them on the GPU machine; CI
// has none. In-process GPU facts: tests/unit/test_gpu_device.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "support/cli_runner.hpp"
#include "support/gpu.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using nlohmann::json;
using rcl::testing::fresh_dir;
using rcl::testing::read_text;
using rcl::testing::run_cli;

const std::string kSmokeGpu = "--preset smoke --device gpu --set eval_interval=0 ";

// The attention probe through the binary on the GPU: the fused kernels exist there (flash and
// memory-efficient on a GPU build) and agree with float64 math within their bounds.
TEST(GpuAttention, FusedBackendsRunAndMatchFloat64Math) {
  RCL_REQUIRE_GPU();
  const auto r = run_cli("probe attention --preset smoke --device gpu --set attention_probe_seq_len=256");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(r.out);
  for (const std::string backend : {"sdpa_flash", "sdpa_mem_efficient"}) {
    int ran = 0;
    for (const auto& row : report.at("results"))
      if (row.at("backend") == backend && row.at("supported").get<bool>()) ++ran;
    EXPECT_GT(ran, 0) << backend << " never ran: " << report.dump(1);
  }
  EXPECT_TRUE(report.at("passed").get<bool>()) << report.dump(1);
}

// Training on the GPU in bf16 and fp16 autocast (fp16 with the dynamic loss scaler): clean runs
// that learn, PASS, with device-event step timing and device memory statistics.
TEST(GpuTraining, Bf16AndFp16AutocastTrainClean) {
  RCL_REQUIRE_GPU();
  for (const std::string precision : {"bf16", "fp16"}) {
    const auto dir = fresh_dir("gpu", precision);
    const auto r = run_cli(kSmokeGpu + "--precision " + precision + " --steps 60 --output-dir " + dir.string());
    EXPECT_EQ(r.exit_code, 0) << precision << ": " << r.err;
    const json report = json::parse(read_text(dir / "report.json"));
    EXPECT_EQ(report.at("verdict"), "PASS") << precision << ": " << report.at("findings").dump(1);
    // On the GPU the checks exercised the device's libraries: rocBLAS (cuBLAS on a CUDA build)
    // passes; one rank leaves RCCL NOT_RUN.
    EXPECT_EQ(report.at("coverage").at("gpu"), true);
    EXPECT_EQ(report.at("components").at(0).at("status"), "PASS") << report.at("components").at(0);
    EXPECT_EQ(report.at("components").at(2).at("status"), "NOT_RUN");
    EXPECT_NE(report.at("coverage_note").get<std::string>().find("Exercised"), std::string::npos);
    std::vector<json> steps;
    std::ifstream metrics(dir / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) steps.push_back(json::parse(line));
    ASSERT_EQ(steps.size(), 60u) << precision;
    EXPECT_LT(steps.back().at("loss").get<double>(), steps.front().at("loss").get<double>() - 0.5) << precision;
    EXPECT_EQ(steps.back().at("step_time_clock"), "device") << precision;
    EXPECT_NE(steps.back().at("memory").at("source"), "rss") << precision;
    if (precision == "fp16") EXPECT_GT(steps.back().at("loss_scale").get<double>(), 1.0);
  }
}

// The GEMM canaries on the device: clean, and the injected corruption is caught on the GPU.
TEST(GpuCanary, DeviceGemmsPassCleanAndTheInjectedCorruptionIsCaught) {
  RCL_REQUIRE_GPU();
  const std::string args = kSmokeGpu + "--steps 5 --set diagnostics.gemm_canary_interval=5 --output-dir ";
  const auto clean_dir = fresh_dir("gpu", "canary-clean");
  EXPECT_EQ(run_cli(args + clean_dir.string()).exit_code, 0);
  for (const auto& f : json::parse(read_text(clean_dir / "report.json")).at("findings"))
    EXPECT_EQ(f.at("signature").get<std::string>().rfind("gemm_", 0), std::string::npos) << f.dump();

  const auto broken_dir = fresh_dir("gpu", "canary-broken");
  const auto broken = run_cli(args + broken_dir.string() + " --inject gemm-corrupt");
  EXPECT_EQ(broken.exit_code, 1) << broken.err;
  const json findings = json::parse(read_text(broken_dir / "report.json")).at("findings");
  bool caught = false;
  for (const auto& f : findings)
    if (f.at("signature") == "gemm_wrong_result") {
      caught = true;
      EXPECT_EQ(f.at("evidence").at("device"), "cuda:0") << f.dump();
    }
  EXPECT_TRUE(caught) << findings.dump(1) << "\n" << broken.err;
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
