// What every fuzz target shares: the input as text or as a file, and the one rule for an
// outcome. A parser may accept its input or refuse it with a ConfigError (the one line the
// binary prints before exit 2); anything else (another exception, a crash, a sanitizer report)
// is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/run/cli.hpp"

namespace rcl::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// A scratch directory of this fuzzing process.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("rcl-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `parse`; a ConfigError is a refusal, any other exception aborts (libFuzzer saves the input).
template <typename Parse>
void expect_accepted_or_refused(Parse parse) {
  try {
    parse();
  } catch (const ConfigError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a ConfigError: %s\n", e.what());
    std::abort();
  }
}

// The binary's own path from flags to a RunConfig: CLI11, then the config resolution.
inline void parse_and_resolve(std::vector<std::string> args) {
  args.insert(args.begin(), "rocm-conformance-llm");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  expect_accepted_or_refused([&] {
    int exit_code = 0;
    if (const auto options = parse_cli(static_cast<int>(argv.size()), argv.data(), exit_code))
      resolve_run_config(*options, /*gpu_present=*/false);
  });
}

}  // namespace rcl::fuzz
