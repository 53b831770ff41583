// The CLI's parse and resolution in-process, as the binary does them, for tests of the result.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "rocm_conformance_llm/run/cli.hpp"

namespace rcl::testing {

// `args` without the program name; a run on a host without a GPU.
inline RunConfig resolve_args(std::vector<std::string> args) {
  args.insert(args.begin(), "rocm-conformance-llm");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  int code = 0;
  auto options = parse_cli(static_cast<int>(argv.size()), argv.data(), code);
  if (!options) throw std::runtime_error("parse failed");
  return resolve_run_config(*options, /*gpu_present=*/false);
}

}  // namespace rcl::testing
