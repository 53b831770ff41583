// Tensor and expert parallelism through the real binary: in a world of one the degrees resolve
// to a recorded no-op (config.json's parallel_layout and the console say what was asked and what
// ran) and a mixture-of-experts model trains; a launched world where the layout needs subgroups
// is refused with one line before anything is written (the training loop does not split the
// model yet: docs/distributed.md, "Tensor and expert parallelism").
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::kSmokeCpu;
using testing::read_text;
using testing::run_cli;

TEST(ModelParallelCli, AWorldOfOneRecordsTheNoOpAndTrainsTheExperts) {
  const fs::path out = fresh_dir("mp", "one");
  const auto r = run_cli(kSmokeCpu +
                         "--steps 6 --set tensor_parallel_degree=2 --set sequence_parallel=true "
                         "--set moe_experts=4 --set moe_top_k=2 --output-dir " +
                         out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto config = nlohmann::json::parse(read_text(out / "config.json"));
  const auto& layout = config.at("parallel_layout");
  EXPECT_EQ(layout.at("tensor_parallel_degree"), 1);
  EXPECT_EQ(layout.at("expert_parallel_degree"), 1);
  EXPECT_EQ(layout.at("sequence_parallel"), false);
  EXPECT_EQ(layout.at("notes").size(), 3u);
  EXPECT_EQ(config.at("training").at("tensor_parallel_degree"), 2);  // what was asked stays recorded
  EXPECT_NE((r.out + r.err).find("parallel layout: tensor_parallel_degree=2"), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "report.json"));
  EXPECT_TRUE(fs::exists(out / "junit.xml"));
  fs::remove_all(out);
}

// The comm mode asks for tensor parallelism and experts; on one rank both are recorded no-ops and
// the model is the one the run trains without the mode (same parameter count, dense MLP).
TEST(ModelParallelCli, TheCommModeOnOneRankKeepsItsModel) {
  const auto parameters_line = [](const std::string& log) {
    const auto at = log.find("model: ");
    return at == std::string::npos ? std::string() : log.substr(at, log.find(" parameters", at) - at);
  };
  const fs::path plain = fresh_dir("mp", "plain");
  const auto without = run_cli(kSmokeCpu + "--steps 2 --output-dir " + plain.string());
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const fs::path out = fresh_dir("mp", "comm");
  const auto r = run_cli(kSmokeCpu + "--steps 2 --stress comm --output-dir " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto config = nlohmann::json::parse(read_text(out / "config.json"));
  const auto& layout = config.at("parallel_layout");
  EXPECT_EQ(layout.at("tensor_parallel_degree"), 1);
  EXPECT_EQ(layout.at("moe_experts"), 0);
  EXPECT_EQ(layout.at("notes").size(), 2u) << layout.dump();
  EXPECT_EQ(config.at("training").at("distributed_tensor_parallel_degree"), 2);  // what the mode asked stays recorded
  EXPECT_EQ(config.at("training").at("distributed_moe_experts"), 4);
  EXPECT_NE((r.out + r.err).find("the dense MLP kept"), std::string::npos);
  EXPECT_FALSE(parameters_line(r.out + r.err).empty());
  EXPECT_EQ(parameters_line(r.out + r.err), parameters_line(without.out + without.err));
  fs::remove_all(plain);
  fs::remove_all(out);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
