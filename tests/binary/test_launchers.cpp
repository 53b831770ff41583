// Real launchers start real 2-rank runs of the binary on this host: torchrun with its static
// rendezvous (torchrun's agent serves the store at MASTER_PORT, rank 0 is a client) and with its
// c10d rendezvous (torch 1.13: rank 0 serves the store; torch >= 2.4: the agent serves it again,
// TORCHELASTIC_USE_AGENT_STORE=True), and Open MPI's mpirun. Every run must train in
// lockstep (the same averaged loss on both ranks) and leave one set of per-rank files that no
// rank overwrites. A launcher that is not installed skips its test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/distributed.hpp"

extern char** environ;

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kWorld = 2;
constexpr int kSteps = 12;
constexpr int kLimitS = 120;  // per run; a run here takes 2-7 s

// What one rank of a clean 2-rank run leaves in --output-dir; config.json comes from rank 0 only.
const std::set<std::string> kExpectedFiles = {"config.json",        "metrics.jsonl",     "metrics.rank1.jsonl",
                                              "report.json",        "report.rank1.json", "junit.xml",
                                              "junit.rank1.xml",    "heartbeat.json",    "heartbeat.rank1.json",
                                              "report.html",        "report.rank1.html", "metrics.prom",
                                              "metrics.rank1.prom", "ocp.jsonl",         "ocp.rank1.jsonl",
                                              "job_report.json",    "job_report.html",   "job_junit.xml",
                                              "job_ocp.jsonl"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string per_rank(const std::string& stem, const std::string& ext, int rank) {
  return rank == 0 ? stem + "." + ext : stem + ".rank" + std::to_string(rank) + "." + ext;
}

std::vector<json> jsonl(const fs::path& path) {
  std::vector<json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

bool installed(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

// The suite itself may run under srun, mpirun or torchrun: their variables must not reach the
// launched ranks, where they would win over the inner launcher's (launch.hpp's detection order).
void forget_outer_launcher() {
  static const char* const kNames[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
  static const char* const kPrefixes[] = {"SLURM_", "OMPI_COMM_WORLD_", "TORCHELASTIC_"};
  std::vector<std::string> names(std::begin(kNames), std::end(kNames));
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    for (const char* prefix : kPrefixes)
      if (entry.rfind(prefix, 0) == 0) names.push_back(entry.substr(0, entry.find('=')));
  }
  for (const auto& name : names) ::unsetenv(name.c_str());
}

struct LauncherRun {
  fs::path out;     // the binary's --output-dir
  std::string log;  // launcher and ranks, stdout and stderr
  int exit_code = -1;
  double seconds = 0;
};

fs::path fresh_run_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-launchers-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// `launcher` followed by the binary and a smoke run of `steps` into `out`, bounded by kLimitS,
// its output into launcher.log. One thread per rank: the binary's default is one per core for
// each rank, and 2 ranks x 2 threads on 2 cores measured ~10x slower than 2 x 1.
std::string launch_command(const fs::path& dir, const fs::path& out, const std::string& launcher, int64_t steps,
                           double collective_timeout_s) {
  return "cd " + dir.string() + " && timeout -k 5 " + std::to_string(kLimitS) + " " + launcher + " " + RCL_BINARY +
         " --preset smoke --device cpu --steps " + std::to_string(steps) + " --output-dir " + out.string() +
         " --set eval_interval=0 --set num_threads=1 --set collective_timeout_s=" +
         std::to_string(collective_timeout_s) + " >launcher.log 2>&1";
}

LauncherRun run_under(const std::string& name, const std::string& launcher) {
  const fs::path dir = fresh_run_dir(name);
  LauncherRun run{dir / "out"};
  const std::string command = launch_command(dir, run.out, launcher, kSteps, 30);
  const auto started = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.log = read_text(dir / "launcher.log");
  ::testing::Test::RecordProperty(name + "_seconds", std::to_string(run.seconds));
  std::cout << name << ": exit " << run.exit_code << " after " << run.seconds << " s\n";
  return run;
}

void expect_two_rank_run(const LauncherRun& run, const std::string& launcher) {
  ASSERT_EQ(run.exit_code, 0) << "(124: killed after " << kLimitS << " s)\n" << run.log;

  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(run.out)) files.insert(entry.path().filename().string());
  EXPECT_EQ(files, kExpectedFiles) << "per-rank files must be distinct, shared ones written once";

  const json config = json::parse(read_text(run.out / "config.json"));
  EXPECT_EQ(config.at("world_size"), kWorld);
  EXPECT_EQ(config.at("launcher"), launcher);

  // report.json's step-time figures skip the warm-up steps.
  const int warmup_steps = config.at("diagnostics").at("warmup_steps").get<int>();
  ASSERT_LT(warmup_steps, kSteps);
  std::vector<std::vector<double>> losses(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::vector<json> rows = jsonl(run.out / per_rank("metrics", "jsonl", rank));
    ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps));
    double slowest_steady_step_s = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].at("step"), static_cast<int>(i) + 1);
      EXPECT_EQ(rows[i].at("rank"), rank);
      EXPECT_EQ(rows[i].at("world_size"), kWorld);
      losses[rank].push_back(rows[i].at("loss").get<double>());
      if (rows[i].at("step").get<int>() > warmup_steps)
        slowest_steady_step_s = std::max(slowest_steady_step_s, rows[i].at("step_time_s").get<double>());
    }

    // Each report is its own rank's: its rank, its findings, and the step times of its own
    // metrics file (the ranks' times differ, so a report overwritten by the other rank shows).
    const json report = json::parse(read_text(run.out / per_rank("report", "json", rank)));
    EXPECT_EQ(report.at("rank"), rank);
    EXPECT_EQ(report.at("outcome"), "completed");
    EXPECT_EQ(report.at("exit_code"), 0);
    for (const auto& finding : report.at("findings")) {
      EXPECT_EQ(finding.at("rank"), rank) << finding.dump(2);
      EXPECT_NE(finding.at("severity"), "fail") << finding.dump(2);
    }
    EXPECT_EQ(report.at("summary").at("steps"), kSteps);
    EXPECT_DOUBLE_EQ(report.at("summary").at("step_time_s").at("max").get<double>(), slowest_steady_step_s);
    EXPECT_NE(read_text(run.out / per_rank("junit", "xml", rank)).find("<testsuite"), std::string::npos);
  }

  // The logged loss is averaged across ranks by an all-reduce: both ranks hold the same value.
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_DOUBLE_EQ(losses[1][step], losses[0][step]) << "step " << step + 1;
  }
  EXPECT_LT(losses[0].back(), losses[0].front() - 1.0) << "the run did not train";
  if (!::testing::Test::HasFailure()) fs::remove_all(run.out.parent_path());
}

// `command` through /bin/sh in its own process group, so the test can end the launcher and its
// ranks at once; -1 when fork fails.
pid_t start_in_own_group(const std::string& command) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// A launcher and its ranks, ended if the test leaves early (unless the test reaped it).
struct LauncherGroup {
  pid_t pid;
  bool reaped = false;
  ~LauncherGroup() {
    if (reaped || pid <= 0) return;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// Steps rank `rank` has logged into `out`'s metrics so far.
std::ptrdiff_t steps_logged(const fs::path& out, int rank) {
  const std::string rows = read_text(out / per_rank("metrics", "jsonl", rank));
  return std::count(rows.begin(), rows.end(), '\n');
}

class LauncherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { forget_outer_launcher(); }
};

// torchrun as torch 1.13 spells it (underscores; 2.x accepts them too). --redirects/--tee: torch
// < 2.0 on Python 3.11 crashes parsing their default "0" (IntFlag no longer iterates the 0
// member, meta-llama/llama#86), so name a stream; stdout lands in --log_dir as well. A short
// --monitor_interval ends torchrun as soon as the ranks do (the default polls every 5 s).
// (Debian sid's torchrun 2.14 cannot start here at all: built without libuv, its rendezvous asks
// for the libuv TCPStore whatever USE_LIBUV says; see docs/distributed.md.)
std::string torchrun(const std::string& rendezvous) {
  return "torchrun --nproc_per_node=" + std::to_string(kWorld) +
         " --no_python --redirects=1 --tee=1 --log_dir=torchrun-logs --monitor_interval=0.2 " + rendezvous;
}

TEST_F(LauncherTest, TorchrunStaticRendezvousWhereTorchrunServesTheStore) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun not installed (python3-torch or a PyTorch wheel)";
  const int port = test::free_port();
  const LauncherRun run =
      run_under("torchrun-static", torchrun("--master_addr=127.0.0.1 --master_port=" + std::to_string(port)));
  expect_two_rank_run(run, "torchrun");
}

TEST_F(LauncherTest, TorchrunC10dRendezvous) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun not installed (python3-torch or a PyTorch wheel)";
  const int port = test::free_port();
  const LauncherRun run =
      run_under("torchrun-c10d", torchrun("--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:" + std::to_string(port)));
  expect_two_rank_run(run, "torchrun");
}

// Waits up to `limit_s` for `done`, every 50 ms; false when it never came.
template <typename Done>
bool wait_for(double limit_s, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// A rank SIGKILLed under torchrun (an OOM kill, a crashed node): torchrun stops the survivors
// with SIGTERM. Rank 0 must end within collective_timeout_s + 30 s (the product's contract) with
// a report that says what happened: `interrupted` by torchrun's SIGTERM, naming rank 1 from its
// heartbeat, or `crashed` naming rank 1 when its collective failed first.
TEST_F(LauncherTest, TorchrunRankSigkilledLeavesRankZeroAReport) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun not installed (python3-torch or a PyTorch wheel)";
  constexpr double kTimeoutS = 3.0;
  const fs::path dir = fresh_run_dir("torchrun-kill");
  const fs::path out = dir / "out";
  const std::string command =
      launch_command(dir, out, torchrun("--master_addr=127.0.0.1 --master_port=" + std::to_string(test::free_port())),
                     100000, kTimeoutS);
  LauncherGroup group{start_in_own_group(command)};
  ASSERT_GT(group.pid, 0);
  const pid_t launcher = group.pid;

  // Steady training on both ranks, then rank 1's pid from its heartbeat.
  ASSERT_TRUE(wait_for(kLimitS, [&] { return steps_logged(out, 0) >= 3 && steps_logged(out, 1) >= 3; }))
      << read_text(dir / "launcher.log");
  const pid_t rank0 = json::parse(read_text(out / "heartbeat.json")).at("pid").get<pid_t>();
  const pid_t rank1 = json::parse(read_text(out / "heartbeat.rank1.json")).at("pid").get<pid_t>();
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  const bool rank0_ended = wait_for(kTimeoutS + 30.0, [&] {
    const char state = test::process_state(rank0);
    return state == 0 || state == 'Z';  // gone, or exited and not yet reaped by torchrun
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  ASSERT_TRUE(rank0_ended) << "rank 0 still running " << waited << " s after rank 1 was killed\n"
                           << read_text(dir / "launcher.log");
  std::cout << "rank 0 ended " << waited << " s after rank 1 was SIGKILLed\n";

  const json report = json::parse(read_text(out / "report.json"));
  const std::string outcome = report.at("outcome");
  if (outcome == "interrupted") {
    EXPECT_EQ(report.at("exit_code"), 4);
    EXPECT_EQ(report.at("interruption").at("signal"), "SIGTERM") << report.dump(2);
    // rank 1's process is gone (or a zombie) by the time torchrun has noticed and signalled.
    EXPECT_EQ(report.at("interruption").at("missing_ranks"), json({1})) << report.dump(2);
  } else {
    ASSERT_EQ(outcome, "crashed") << report.dump(2);
    EXPECT_EQ(report.at("exit_code"), 3);
    const auto& findings = report.at("findings");
    EXPECT_TRUE(std::any_of(findings.begin(), findings.end(), [](const json& f) {
      return f.at("evidence").value("missing_ranks", json()) == json({1});
    })) << findings.dump(2);
  }
  EXPECT_NE(read_text(out / "junit.xml").find("<testsuite"), std::string::npos);
  if (!HasFailure()) fs::remove_all(dir);
}

// One command for start and restart under torchrun --max_restarts=1: rank 1 SIGKILLed mid-run,
// torchrun stops rank 0 and starts both again with the same command line; `--resume auto`
// resumes them from the newest complete checkpoint, and the job finishes with every step's loss
// on both ranks equal, bit for bit, to an uninterrupted run's. Both reports count one restart.
TEST_F(LauncherTest, TorchrunMaxRestartsResumesAKilledRankBitExact) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun not installed (python3-torch or a PyTorch wheel)";
  constexpr int64_t kRunSteps = 150;
  // The launcher's command with the run's own flags added before its redirection.
  const auto restartable = [](const fs::path& dir) {
    std::string cmd = launch_command(
        dir, dir / "out",
        torchrun("--max_restarts=1 --master_addr=127.0.0.1 --master_port=" + std::to_string(test::free_port())),
        kRunSteps, 5.0);
    return cmd.insert(cmd.find(" >launcher.log"), " --set dropout=0.1 --checkpoint-interval 10 --resume auto");
  };
  const fs::path straight = fresh_run_dir("torchrun-restart-straight");
  ASSERT_EQ(std::system(restartable(straight).c_str()), 0) << read_text(straight / "launcher.log");

  const fs::path dir = fresh_run_dir("torchrun-restart");
  const fs::path out = dir / "out";
  const std::string cmd = restartable(dir);
  LauncherGroup group{start_in_own_group(cmd)};
  ASSERT_GT(group.pid, 0);
  const pid_t launcher = group.pid;
  ASSERT_TRUE(wait_for(kLimitS, [&] { return steps_logged(out, 0) >= 25 && steps_logged(out, 1) >= 25; }))
      << read_text(dir / "launcher.log");
  const pid_t rank1 = json::parse(read_text(out / "heartbeat.rank1.json")).at("pid").get<pid_t>();
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  int status = 0;
  ASSERT_TRUE(wait_for(2.0 * kLimitS, [&] { return ::waitpid(launcher, &status, WNOHANG) == launcher; }))
      << read_text(dir / "launcher.log");
  group.reaped = true;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(dir / "launcher.log");

  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json report = json::parse(read_text(out / per_rank("report", "json", rank)));
    EXPECT_EQ(report.at("outcome"), "completed");
    EXPECT_EQ(report.at("restarts").at("count"), 1) << report.at("restarts");
    const std::vector<json> resumed = jsonl(out / per_rank("metrics", "jsonl", rank));
    const std::vector<json> reference = jsonl(straight / "out" / per_rank("metrics", "jsonl", rank));
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kRunSteps));
    ASSERT_EQ(reference.size(), static_cast<size_t>(kRunSteps));
    for (size_t i = 0; i < resumed.size(); ++i) {
      EXPECT_EQ(resumed[i].at("step"), reference[i].at("step"));
      EXPECT_EQ(resumed[i].at("loss").get<double>(), reference[i].at("loss").get<double>()) << "step " << i + 1;
    }
  }
  if (!HasFailure()) {
    fs::remove_all(dir);
    fs::remove_all(straight);
  }
}

TEST_F(LauncherTest, Mpirun) {
  if (!installed("mpirun")) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  const int port = test::free_port();
  // mpirun gives ranks no rendezvous: rank 0's address and a port go in with -x. Root needs
  // --allow-run-as-root; --oversubscribe lets 2 ranks start on a host with fewer free slots.
  const LauncherRun run =
      run_under("mpirun", "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(kWorld) +
                              " -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" + std::to_string(port));
  expect_two_rank_run(run, "mpirun");
}

// The Slurm templates pass their own --stress, --device and --output-dir; a user's flag of the
// same name must win (the binary refuses an option given twice: "--device: At Most 1 required
// but received 2" was a template's `--device gpu` ahead of the user's `--device cpu`). srun is a
// stub here that records its arguments and runs the task once, as one rank.
TEST_F(LauncherTest, SlurmTemplateLetsTheUsersFlagsWin) {
  const fs::path dir = fresh_run_dir("slurm-template");
  {
    std::ofstream srun(dir / "srun");
    srun << "#!/usr/bin/env bash\n"
            "printf '%s\\n' \"$@\" > \"$(dirname \"$0\")/srun.args\"\n"
            "while [[ $1 == --* ]]; do shift; done\n"
            "SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=1 exec \"$@\"\n";
  }
  fs::permissions(dir / "srun", fs::perms::owner_all);
  const std::string command = "cd " + dir.string() + " && PATH=" + dir.string() +
                              ":$PATH SLURM_JOB_ID=77 SLURM_JOB_NAME=rcl-test " +
                              "SLURM_GPUS_ON_NODE=2 SLURM_JOB_NUM_NODES=1 RCL_REPO=" + RCL_SOURCE_DIR +
                              " RCL_BINARY=" + RCL_BINARY + " RCL_RUNS_DIR=" + (dir / "runs").string() +
                              " RCL_STRESS=rng timeout -k 5 " + std::to_string(kLimitS) + " bash " + RCL_SOURCE_DIR +
                              "/scripts/slurm/one_node.sbatch --device cpu --preset smoke --steps 3 "
                              "--set num_threads=1 --set eval_interval=0 >launcher.log 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << read_text(dir / "launcher.log");
  const std::string args = read_text(dir / "srun.args");
  EXPECT_NE(args.find("--stress\nrng\n"), std::string::npos) << args;  // the template's, not given by the user
  EXPECT_NE(args.find("--device\ncpu\n"), std::string::npos) << args;
  EXPECT_EQ(args.find("--device\ngpu\n"), std::string::npos) << args;
  const json config = json::parse(read_text(dir / "runs" / "rcl-test-77" / "config.json"));
  EXPECT_EQ(config.at("launcher"), "slurm");
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
