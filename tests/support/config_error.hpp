// What a refusal test reads: the one line of the ConfigError a call throws.
#pragma once

#include <string>

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl::testing {

// The message of the ConfigError `run()` throws, "" when it throws none. Any other exception
// passes through: the test fails on it.
template <typename Run>
std::string config_error_of(Run&& run) {
  try {
    run();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace rcl::testing
