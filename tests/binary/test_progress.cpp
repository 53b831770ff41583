// Terminal progress through the binary: on a terminal one status line updated in place with \r;
// in a log file plain lines and no control character. The binary runs on a pseudo-terminal
// (forkpty) and with its output redirected to files. The line's text:
// tests/unit/test_progress_text.cpp.
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/reports/progress.hpp"
#include "support/cli_runner.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using rcl::testing::count_of;
using rcl::testing::run_cli;

const std::string kRun = rcl::testing::kSmokeCpu + "--steps 6 ";

// Everything the binary wrote to its terminal, and its exit code.
std::pair<std::string, int> run_on_pty(const std::string& args) {
  int master = -1;
  const std::string cmd = std::string("exec ") + RCL_BINARY + " " + args;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    ::setenv("TERM", "xterm", 1);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;  // EIO once the child has closed the terminal
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

TEST(Progress, OnATerminalOneStatusLineIsUpdatedInPlace) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-progress-tty-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto [out, code] = run_on_pty(kRun + "--output-dir " + dir.string());
  ASSERT_EQ(code, 0) << out;
  for (int step = 1; step <= 6; ++step)
    EXPECT_NE(out.find("\r\x1b[Kstep " + std::to_string(step) + "/6 ("), std::string::npos) << "step " << step << "\n"
                                                                                            << out;
  EXPECT_NE(out.find("findings: 0 fail"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "| loss "), 0u) << "no per-step lines on a terminal:\n" << out;
  // Log lines still come, each on its own line: the status line is wiped first.
  EXPECT_NE(out.find("\r\x1b[K"), std::string::npos);
  EXPECT_NE(out.find("ROCm component summary"), std::string::npos);
  EXPECT_EQ(
      std::regex_search(out, std::regex("tok/s \\| ETA [0-9:]+ \\| findings: [^\r\n]*[0-9]{2}:[0-9]{2}:[0-9]{2}")),
      false)
      << "a log line landed in the middle of the status line:\n"
      << out;
  fs::remove_all(dir);
}

TEST(Progress, WithoutATerminalPlainLinesAndNoControlCharacters) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-progress-log-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto r = run_cli(kRun + "--output-dir " + dir.string(), "TERM=xterm");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "| loss "), 6u) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  EXPECT_EQ(r.err.find("\x1b[K"), std::string::npos);
  EXPECT_EQ(r.err.find("ETA"), std::string::npos);
  EXPECT_EQ(count_of(r.err, "summary: "), 0u) << "the default interval is minutes";
  fs::remove_all(dir);
}

// The soak summary line, with a tiny interval: the throughput over the interval, findings so
// far, ETA, and a memory trend that sees a real leak (memory-leak keeps 8 MiB per step alive).
TEST(Progress, SoakSummaryLinesShowThroughputFindingsEtaAndTheMemoryTrend) {
  const fs::path dir = fs::temp_directory_path() / ("rcl-progress-summary-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto r = run_cli(rcl::testing::kSmokeCpu +
                         "--steps 12 --inject memory-leak=8MiB/step "
                         "--set diagnostics.summary_interval_s=0.001 --output-dir " +
                         dir.string());
  ASSERT_LE(r.exit_code, 1) << r.err;
  const std::regex line(
      R"(summary: step (\d+)/12 \(\d+%\) \| (\d+) tok/s \| ETA [0-9:]+ \| findings: \d+ fail, \d+ warn, )"
      R"(\d+ info \| mem [0-9.]+MiB \(([-+][0-9.]+)MiB over the last [0-9.]+ min, ([-+][0-9.]+)MiB since step 1\))");
  int summaries = 0;
  int64_t last_step = 0;
  double since_first = 0;
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), line); it != std::sregex_iterator(); ++it) {
    ++summaries;
    EXPECT_GT(std::stoll((*it)[1]), last_step);
    last_step = std::stoll((*it)[1]);
    EXPECT_GT(std::stoll((*it)[2]), 0) << it->str();
    since_first = std::stod((*it)[4]);
  }
  EXPECT_GE(summaries, 2) << r.err;
  EXPECT_EQ(count_of(r.err, "summary: "), static_cast<size_t>(summaries)) << "every summary line is complete";
  // 8 MiB a step from step 1: at the last summary's step N, about 8 * (N - 1) MiB more than at step 1.
  EXPECT_GT(since_first, 0.75 * 8 * static_cast<double>(last_step - 1)) << r.err;
  fs::remove_all(dir);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
