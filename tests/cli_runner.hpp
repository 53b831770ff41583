// Runs the built binary as a user would and captures exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
  const std::string cmd = env + " " + RCL_BINARY + " " + args + " >" + (dir / "out").string() + " 2>" +
                          (dir / "err").string();
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(dir / "out");
  r.err = read_text(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace rcl::testing
