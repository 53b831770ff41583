// Runs the built binary as a user would and captures exit code, stdout and stderr.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace rcl::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A path under the temp directory for one test's output, removed if it exists.
inline std::filesystem::path fresh_dir(const std::string& suite, const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("rcl-" + suite + "-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

// The smoke preset on one CPU thread with validation off: the short real run most tests use.
inline const std::string kSmokeCpu = "--preset smoke --device cpu --set num_threads=1 --set eval_interval=0 ";

// Occurrences of `what` in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `args` is appended to the binary's path through /bin/sh, so quote what needs quoting.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("rcl-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  const std::string cmd =
      env + " " + RCL_BINARY + " " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(dir / "out");
  r.err = read_text(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

// Polls `done` every 50 ms for at most `limit`.
inline bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
  for (const auto deadline = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(50)))
    if (done()) return true;
  return done();
}

// The binary, run in the background with its output in `log`.
class BackgroundRun {
 public:
  BackgroundRun(const std::string& args, const std::filesystem::path& log, const std::string& env = "") {
    const std::string cmd = env + " exec " + RCL_BINARY + " " + args + " >" + log.string() + " 2>&1";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~BackgroundRun() {
    if (!exit_code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  // The exit code, or nullopt when the run is still going after `limit` (then it is killed).
  std::optional<int> wait(std::chrono::seconds limit) {
    wait_until(
        [&] {
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
          exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return true;
        },
        limit);
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

}  // namespace rcl::testing
