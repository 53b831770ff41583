// Launcher detection from synthetic environments: torchrun, srun (compressed node lists),
// mpirun, none, and bad values that must be ConfigErrors naming the variable.
#include <map>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"
#include "support/config_error.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using Env = std::map<std::string, std::string>;

LaunchInfo parse(const Env& env) {
  return parse_launch([&](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// The ConfigError's message, or "" when parsing succeeded.
std::string error_of(const Env& env) {
  return testing::config_error_of([&] { parse(env); });
}

TEST(LaunchTest, NoLauncherIsOneProcess) {
  const LaunchInfo info = parse({{"HOME", "/root"}});
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_FALSE(info.distributed());
}

TEST(LaunchTest, Torchrun) {
  const LaunchInfo info = parse({{"RANK", "5"},
                                 {"WORLD_SIZE", "16"},
                                 {"LOCAL_RANK", "1"},
                                 {"MASTER_ADDR", "node07"},
                                 {"MASTER_PORT", "29511"},
                                 // srun variables underneath torchrun must not win
                                 {"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "2"},
                                 {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 16);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.master_addr, "node07");
  EXPECT_EQ(info.master_port, 29511);
  EXPECT_TRUE(info.distributed());
}

TEST(LaunchTest, TorchrunAgentStoreMakesRankZeroAClient) {
  const Env base = {{"RANK", "0"},        {"WORLD_SIZE", "2"},      {"LOCAL_RANK", "0"},
                    {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RESTART_COUNT", "2"}};
  // Rank 0 serves the store itself (torchrun's c10d rendezvous before 2.4 says False).
  Env own_store = base;
  own_store["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(parse(own_store).launcher_store_prefix.has_value());
  // The agent already listens on MASTER_PORT (static rendezvous): keys go under its attempt.
  Env agent_store = base;
  agent_store["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_EQ(parse(agent_store).launcher_store_prefix, "/worker/attempt_2");
  agent_store.erase("TORCHELASTIC_RESTART_COUNT");
  EXPECT_NE(error_of(agent_store).find("TORCHELASTIC_RESTART_COUNT"), std::string::npos);
}

TEST(LaunchTest, TorchrunWorldOfOneNeedsNoRendezvous) {
  const LaunchInfo info = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}});
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_FALSE(info.distributed());
}

TEST(LaunchTest, SrunWithCompressedNodeList) {
  const LaunchInfo info = parse({{"SLURM_PROCID", "9"},
                                 {"SLURM_NTASKS", "16"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_JOB_NODELIST", "node[01-04,07],gpu5"},
                                 {"SLURM_JOB_ID", "123456"}});
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 9);
  EXPECT_EQ(info.world_size, 16);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.master_addr, "node01");
  // Derived from the job id so jobs sharing a node do not collide, below the ephemeral range.
  EXPECT_EQ(info.master_port, 29500 + 123456 % 2000);
}

TEST(LaunchTest, SrunPrefersStepValuesAndExplicitMaster) {
  const Env base = {{"SLURM_PROCID", "1"},
                    {"SLURM_NTASKS", "8"},
                    {"SLURM_STEP_NUM_TASKS", "2"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_STEP_NODELIST", "gpu[3-4]"},
                    {"SLURM_JOB_NODELIST", "gpu[1-4]"}};
  LaunchInfo info = parse(base);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.master_addr, "gpu3");
  EXPECT_EQ(info.master_port, 29500);

  Env explicit_master = base;
  explicit_master["MASTER_ADDR"] = "10.0.0.8";
  explicit_master["MASTER_PORT"] = "40000";
  info = parse(explicit_master);
  EXPECT_EQ(info.master_addr, "10.0.0.8");
  EXPECT_EQ(info.master_port, 40000);
}

TEST(LaunchTest, SlurmNodeListForms) {
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu5", "V"), "node01");
  EXPECT_EQ(first_slurm_host("gpu5,node[01-04]", "V"), "gpu5");
  EXPECT_EQ(first_slurm_host("nid[007,010-012]", "V"), "nid007");
  EXPECT_EQ(first_slurm_host("rack[2-3]-n[08-09]", "V"), "rack2-n08");
  EXPECT_EQ(first_slurm_host("a[1-2]-ib,b3", "V"), "a1-ib");
  EXPECT_EQ(first_slurm_host("single", "V"), "single");
  EXPECT_THROW(first_slurm_host("node[01-04", "V"), ConfigError);
  EXPECT_THROW(first_slurm_host("node]01[", "V"), ConfigError);
  EXPECT_THROW(first_slurm_host("node[a-b]", "V"), ConfigError);
  EXPECT_THROW(first_slurm_host(",node1", "V"), ConfigError);
  const std::string refusal = testing::config_error_of([] { first_slurm_host("node[01", "SLURM_JOB_NODELIST"); });
  EXPECT_NE(refusal.find("SLURM_JOB_NODELIST"), std::string::npos) << "'" << refusal << "'";
}

TEST(LaunchTest, Mpirun) {
  LaunchInfo info = parse({{"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(info.launcher, "mpirun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 3);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);

  info = parse({{"OMPI_COMM_WORLD_RANK", "5"},
                {"OMPI_COMM_WORLD_SIZE", "8"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                {"MASTER_ADDR", "head"},
                {"MASTER_PORT", "29600"}});
  EXPECT_EQ(info.master_addr, "head");
  EXPECT_EQ(info.master_port, 29600);
}

TEST(LaunchTest, BadValuesNameTheVariable) {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"LOCAL_RANK", "0"}}, "WORLD_SIZE"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "LOCAL_RANK"},
      {{{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, "RANK"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "LOCAL_RANK"},
      {{{"RANK", " 1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK"},
      {{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODELIST", "n1"}},
       "SLURM_PROCID"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}, {"SLURM_LOCALID", "0"}}, "SLURM_NTASKS"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_LOCALID"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}}, "SLURM_JOB_NODELIST"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NODELIST", "n[1-"}},
       "SLURM_JOB_NODELIST"},
      {{{"SLURM_PROCID", "1"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_NODELIST", "n1"},
        {"SLURM_JOB_ID", "12a"}},
       "SLURM_JOB_ID"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2.5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
       "OMPI_COMM_WORLD_SIZE"},
      {{{"OMPI_COMM_WORLD_RANK", "4"},
        {"OMPI_COMM_WORLD_SIZE", "8"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}},
       "MASTER_ADDR"},
  };
  for (const auto& [env, variable] : cases) {
    const std::string message = error_of(env);
    EXPECT_NE(message.find(variable), std::string::npos)
        << "expected a ConfigError naming " << variable << ", got '" << message << "'";
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
