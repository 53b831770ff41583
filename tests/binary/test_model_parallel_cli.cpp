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

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::kSmokeCpu;
using testing::read_text;
using testing::run_cli;

TEST(ModelParallelCli, AWorldOfOneRecordsTheNoOpAndTrainsTheExperts) {
  const fs::path out = fresh_dir("mp", "one");
  const auto r = run_cli(kSmokeCpu + "--steps 6 --set tensor_parallel_degree=2 --set sequence_parallel=true "
                         "--set moe_experts=4 --set moe_top_k=2 --output-dir " + out.string());
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

TEST(ModelParallelCli, ALayoutThatNeedsSubgroupsIsRefusedBeforeAnythingIsWritten) {
  const std::string launched = "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1";
  for (const std::string& setting : {std::string("--set tensor_parallel_degree=2"), std::string("--set moe_experts=4")}) {
    const fs::path out = fresh_dir("mp", "refused");
    const auto r = run_cli(kSmokeCpu + setting + " --output-dir " + out.string(), launched);
    EXPECT_EQ(r.exit_code, 2) << setting << ": " << r.err;
    EXPECT_NE(r.err.find("invalid " + setting.substr(6)), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << setting;
  }
}

}  // namespace
}  // namespace rcl
