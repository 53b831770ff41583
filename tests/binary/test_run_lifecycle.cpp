// Every run ends with a verdict: the error boundary (exit 2 before the output
// directory is usable, a "crashed" report and exit 3 after), stop signals (an "interrupted"
// report and exit 4, also when the main thread is stuck), and strict command-line input.
// Through the real binary where a natural trigger exists; in-process (a throwaway detector that
// throws) where none does. Every wait is bounded: a run that does not end fails the test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/detectors/catalog.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/run/job.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::BackgroundRun;
using rcl::testing::read_text;
using rcl::testing::run_cli;
using rcl::testing::wait_until;
using namespace std::chrono_literals;

// The smoke preset on one CPU thread, validation off.
const std::string kSmoke = "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 ";

fs::path fresh_dir(const std::string& name) { return rcl::testing::fresh_dir("life", name); }

json read_report(const fs::path& dir) {
  return fs::exists(dir / "report.json") ? json::parse(read_text(dir / "report.json")) : json();
}

// The loop is running once the first step reached metrics.jsonl (the handlers are installed).
bool training_started(const fs::path& dir) { return !read_text(dir / "metrics.jsonl").empty(); }

void expect_interrupted(const json& report, const std::string& signal) {
  EXPECT_EQ(report.value("outcome", ""), "interrupted") << report.dump();
  EXPECT_EQ(report.value("verdict", ""), "INTERRUPTED");
  EXPECT_EQ(report.value("exit_code", 0), 4);
  ASSERT_TRUE(report.contains("interruption")) << report.dump();
  EXPECT_EQ(report["interruption"].at("signal"), signal);
}

// --- signals ---

class StopSignal : public ::testing::TestWithParam<int> {};

TEST_P(StopSignal, StopsAtTheNextStepBoundaryWithAnInterruptedReport) {
  const int sig = GetParam();
  const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGUSR1";
  const fs::path dir = fresh_dir("signal-" + name);
  BackgroundRun run(kSmoke + "--steps 1000000 --output-dir " + dir.string(), dir.string() + ".log");
  ASSERT_TRUE(wait_until([&] { return training_started(dir); }, 120s)) << read_text(dir.string() + ".log");
  run.signal(sig);
  const auto code = run.wait(120s);
  ASSERT_TRUE(code) << "still running 120 s after " << name;
  EXPECT_EQ(*code, 4) << read_text(dir.string() + ".log");
  const json report = read_report(dir);
  expect_interrupted(report, name);
  EXPECT_EQ(report["interruption"].at("phase"), "step_boundary");
  EXPECT_GE(report["interruption"].at("step").get<int64_t>(), 1);
  EXPECT_NE(read_text(dir / "junit.xml").find("INTERRUPTED"), std::string::npos);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Signals, StopSignal, ::testing::Values(SIGTERM, SIGUSR1),
                         [](const auto& info) { return std::string(info.param == SIGTERM ? "SIGTERM" : "SIGUSR1"); });

// hang@step=3 never returns to a step boundary; with a long watchdog only the signal watcher can
// end the run: after the grace on one signal, at once on a second.
class StuckRun : public ::testing::TestWithParam<bool> {};

TEST_P(StuckRun, SignalWatcherWritesTheInterruptedReport) {
  const bool twice = GetParam();
  const fs::path dir = fresh_dir(twice ? "stuck-twice" : "stuck-once");
  BackgroundRun run(kSmoke + "--steps 1000 --inject hang@step=3 --watchdog-timeout 3600 --output-dir " + dir.string(),
                    dir.string() + ".log");
  ASSERT_TRUE(wait_until([&] { return training_started(dir); }, 120s)) << read_text(dir.string() + ".log");
  std::this_thread::sleep_for(1s);  // step 3's forward: a few milliseconds after step 1 was published
  run.signal(SIGTERM);
  if (twice) {
    // Sent back to back, both would be pending together, and Linux delivers the lower number
    // (SIGINT) first: the second signal goes once the first one is heard.
    ASSERT_TRUE(
        wait_until([&] { return read_text(dir.string() + ".log").find("received SIGTERM") != std::string::npos; }, 30s))
        << read_text(dir.string() + ".log");
    run.signal(SIGINT);
  }
  const auto code = run.wait(twice ? 60s : 60s + 10s);
  ASSERT_TRUE(code) << "a stuck run outlived its signal(s)";
  EXPECT_EQ(*code, 4) << read_text(dir.string() + ".log");
  const json report = read_report(dir);
  expect_interrupted(report, "SIGTERM");  // the first signal names the stop
  EXPECT_EQ(report["interruption"].at("phase"), "forward");
  EXPECT_EQ(report["interruption"].at("step"), 3);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Signals, StuckRun, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "SecondSignal" : "AfterGrace"); });

// --- long runs: --duration and heartbeat.json ---

TEST(Duration, TimeBoxEndsTheRunAtAStepBoundaryWithANormalVerdict) {
  const fs::path dir = fresh_dir("duration");
  const auto r = run_cli(kSmoke + "--steps 100000000 --duration 2s --output-dir " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json report = read_report(dir);
  EXPECT_EQ(report.value("outcome", ""), "completed") << report.dump();
  const int64_t steps = report["summary"]["steps"];
  EXPECT_GE(steps, 1);
  EXPECT_LT(steps, 100000000);
  EXPECT_EQ(json::parse(read_text(dir / "config.json"))["training"]["max_duration_s"], 2.0);
  fs::remove_all(dir);
}

json read_heartbeat(const fs::path& dir) {
  const std::string text = read_text(dir / "heartbeat.json");
  return text.empty() ? json() : json::parse(text);  // rewritten by rename: never half a file
}

// A stuck run keeps a fresh heartbeat whose step stays put and whose seconds_since_progress grow
// (a slow run's step moves); at the end it names the outcome.
TEST(Heartbeat, TellsAStuckRunFromALiveOneAndNamesTheOutcome) {
  const fs::path dir = fresh_dir("heartbeat");
  BackgroundRun run(kSmoke + "--steps 1000 --inject hang@step=3 --watchdog-timeout 3600 --output-dir " + dir.string(),
                    dir.string() + ".log");
  ASSERT_TRUE(wait_until(
      [&] {
        const json h = read_heartbeat(dir);
        return h.is_object() && h["phase"] == "forward" && h["step"] == 3 && h["seconds_since_progress"] > 1.0;
      },
      120s))
      << read_text(dir / "heartbeat.json") << read_text(dir.string() + ".log");
  const json first = read_heartbeat(dir);
  EXPECT_EQ(first["pid"], run.pid());
  EXPECT_EQ(first["rank"], 0);
  EXPECT_EQ(first["status"], "running");
  EXPECT_EQ(first["last_completed_step"], 1);  // step 2 is published once step 3 has run
  ASSERT_TRUE(wait_until([&] { return read_heartbeat(dir)["unix_time"] > first["unix_time"]; }, 30s));
  const json later = read_heartbeat(dir);
  EXPECT_EQ(later["step"], 3);
  EXPECT_GT(later["seconds_since_progress"].get<double>(), first["seconds_since_progress"].get<double>());
  run.signal(SIGTERM);
  run.signal(SIGTERM);
  ASSERT_TRUE(run.wait(60s));
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");

  // A run that ends: the last heartbeat names its outcome and its last step.
  const fs::path done = fresh_dir("heartbeat-done");
  ASSERT_EQ(run_cli(kSmoke + "--steps 3 --output-dir " + done.string()).exit_code, 0);
  const json last = read_heartbeat(done);
  EXPECT_EQ(last["status"], "completed");
  EXPECT_EQ(last["last_completed_step"], 3);
  fs::remove_all(done);
}

// --- the error boundary ---

void expect_crashed(const fs::path& dir, int code, const std::string& phase, const std::string& log) {
  EXPECT_EQ(code, 3) << log;
  const json report = read_report(dir);
  EXPECT_EQ(report.value("outcome", ""), "crashed") << log;
  EXPECT_EQ(report.value("verdict", ""), "CRASHED");
  EXPECT_TRUE(fs::exists(dir / "junit.xml"));
  bool classified = false;
  for (const auto& f : report.value("findings", json::array()))
    classified = classified || (f.at("severity") == "fail" && f.at("evidence").value("phase", "") == phase &&
                                !f.at("component").get<std::string>().empty() && f.at("step").get<int64_t>() >= 1);
  EXPECT_TRUE(classified) << "no crash finding in phase " << phase << ": " << report.dump();
}

// A ballast the host's free memory holds (the sizing check passes) but the process may not map
// (ulimit -v): the allocation fails while the model is set up, a crash report naming the host.
TEST(ErrorBoundary, BallastTooLargeForTheDeviceIsACrashReport) {
  const fs::path dir = fresh_dir("ballast");
  const auto r = run_cli(kSmoke + "--steps 2 --set memory_pressure_bytes=4000000000 --output-dir " + dir.string(),
                         "ulimit -v 2000000;");
  if (r.exit_code == 2 && r.err.find("does not fit the host's memory") != std::string::npos)
    GTEST_SKIP() << "this host has less than 4 GB available: " << r.err;
  if (r.err.find("error while loading shared libraries") != std::string::npos)
    GTEST_SKIP() << "this build's libraries do not map under ulimit -v 2000000 (a CUDA wheel's): " << r.err;
  expect_crashed(dir, r.exit_code, "setup_model", r.out + r.err);
  EXPECT_NE(read_text(dir / "report.json").find("\"host_out_of_memory\""), std::string::npos);
  fs::remove_all(dir);
}

// Every part of the data is opened and cut into windows at start-up: a text too short for one
// window of the run's seq_len, like an empty one, is refused before anything is written (exit 2,
// one line naming the file and what it lacks), not inside the model's setup.
TEST(ErrorBoundary, DataFileShortOfOneWindowIsRefusedBeforeAnythingIsWritten) {
  const fs::path dir = fresh_dir("data");
  const fs::path data = dir.string() + "-short.txt";
  std::ofstream(data) << "too short";  // 11 byte tokens: no window of seq_len + 1
  const auto r = run_cli(kSmoke + "--steps 2 --data " + data.string() + " --output-dir " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.out + r.err;
  EXPECT_NE(r.err.find("invalid data_path '" + data.string() + "': 11 tokens make 0 window(s) of seq_len+1="),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("need at least"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir)) << "the refused run wrote " << dir;

  std::ofstream(data, std::ios::trunc).close();
  const auto empty = run_cli(kSmoke + "--steps 2 --data " + data.string() + " --output-dir " + dir.string());
  EXPECT_EQ(empty.exit_code, 2) << empty.out + empty.err;
  EXPECT_NE(empty.err.find("contains no text"), std::string::npos) << empty.err;
  EXPECT_FALSE(fs::exists(dir)) << "the refused run wrote " << dir;
  fs::remove(data);
}

// A detector that fails where no natural fault reaches: while the run sets up its checks, or in
// the whole-run checks after the last step.
class ThrowingDetector final : public Detector {
 public:
  ThrowingDetector(const DiagnosticsConfig& cfg, FindingLog& log, bool in_preflight)
      : Detector(cfg, log), in_preflight_(in_preflight) {}
  void preflight() override {
    if (in_preflight_) throw std::runtime_error("throwaway detector: preflight failed");
  }
  void finish() override { throw std::runtime_error("throwaway detector: finish failed"); }

 private:
  bool in_preflight_;
};

int run_in_process(const fs::path& dir) {
  const std::string args = kSmoke + "--steps 3 --output-dir " + dir.string();
  std::vector<std::string> words{"rocm-conformance-llm"};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  int exit_code = 0;
  const auto options = parse_cli(int(argv.size()), argv.data(), exit_code);
  return run_job(resolve_run_config(*options, false), false);
}

class ThrowingDetectorStage : public ::testing::TestWithParam<bool> {};

TEST_P(ThrowingDetectorStage, IsACrashReportNamingThePhase) {
  const bool in_preflight = GetParam();
  const auto registration =
      register_detector(DetectorSpec{"throwaway_throwing", "step", {}, {}, [in_preflight](const DetectorContext& c) {
                                       return std::make_unique<ThrowingDetector>(c.diag, c.log, in_preflight);
                                     }});
  const fs::path dir = fresh_dir(in_preflight ? "detector-setup" : "detector-finish");
  const int code = run_in_process(dir);
  expect_crashed(dir, code, in_preflight ? "setup_detectors" : "final_checks", "");
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(ErrorBoundary, ThrowingDetectorStage, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "Setup" : "Finish"); });

TEST(ErrorBoundary, UnusableOutputDirIsAUsageError) {
  const fs::path base = fresh_dir("outdir");
  fs::create_directories(base);
  std::ofstream(base / "file").close();
  for (const fs::path& out : {base / "file", base / "file" / "below"}) {
    const auto r = run_cli(kSmoke + "--steps 2 --output-dir " + out.string());
    EXPECT_EQ(r.exit_code, 2) << out << ": " << r.err;
    EXPECT_NE(r.err.find("not a directory"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  fs::remove_all(base);
}

TEST(ErrorBoundary, UnwritableReportIsAClearErrorAndExitThree) {
  const fs::path dir = fresh_dir("unwritable");
  fs::create_directories(dir);
  std::ofstream(dir / "file").close();  // a regular file where the output directory should be: even root fails
  FindingLog log(find_signature);
  RunSummary summary;
  ReportWriter writer(dir / "file" / "out", 0, json::object(), json::object(), log, summary, 0);
  EXPECT_EQ(writer.write(RunOutcome::completed), 3);
  EXPECT_EQ(writer.write(RunOutcome::completed), 3);  // first call wins, also when it failed
  fs::remove_all(dir);
}

// --- strict input ---

TEST(StrictInput, UnknownTopLevelConfigKeyIsRefused) {
  const fs::path file = fresh_dir("config") += ".json";
  std::ofstream(file) << R"({"preset": "smoke", "trainig": {"steps": 3}})";
  const auto r = run_cli("--config " + file.string() + " --print-config");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown key 'trainig'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("known: preset, stress_modes, training, stress_profile, diagnostics, rocm, inject"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  fs::remove(file);
}

TEST(StrictInput, OutOfRangeNumericFlagsAreRefusedNotClamped) {
  for (const std::string args :
       {"--steps 99999999999999999999", "--steps -5", "--seed 99999999999999999999", "--seed -1",
        "--watchdog-timeout -3", "--watchdog-timeout nan", "--watchdog-timeout inf", "--duration 5x", "--duration 0",
        "--duration -3m", "--duration 30min", "--checkpoint-interval 0", "--checkpoint-interval 5q",
        "--keep-checkpoints 0", "--keep-checkpoints many"}) {
    const auto r = run_cli(args + " --print-config");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    const std::string value = args.substr(args.find(' ') + 1);
    EXPECT_NE(r.err.find(value), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
