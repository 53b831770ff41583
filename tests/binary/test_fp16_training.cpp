// fp16 through the binary: `--stress gemm --precision fp16` runs clean, fp16 GEMM canaries
// included. The loss scaler on the model in-process: tests/unit/test_fp16_overflow.cpp. libtorch
// 1.13 has no fp16 matmul on the CPU: the test skips there only, saying so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cli_runner.hpp"
#include "support/cpu_fp16.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;

TEST(Fp16Training, GemmStressInFp16RunsCleanThroughTheBinary) {
  RCL_REQUIRE_FP16_MATMUL();
  const fs::path dir = fs::temp_directory_path() / ("rcl-fp16-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto run = rcl::testing::run_cli(
      "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 --steps 12 --stress gemm "
      "--precision fp16 --set diagnostics.gemm_canary_interval=6 --output-dir " +
      dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto config = nlohmann::json::parse(rcl::testing::read_text(dir / "config.json"));
  const auto report = nlohmann::json::parse(rcl::testing::read_text(dir / "report.json"));
  std::ifstream metrics(dir / "metrics.jsonl");
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(metrics, line);)
    if (!line.empty()) steps.push_back(nlohmann::json::parse(line));
  fs::remove_all(dir);
  EXPECT_EQ(config.at("training").at("mixed_precision"), "fp16");
  EXPECT_EQ(config.at("training").at("hidden_size"), 128);  // the gemm mode's width
  EXPECT_EQ(report.at("verdict"), "PASS");
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_LT(steps.back().at("loss").get<double>(), steps.front().at("loss").get<double>());
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
