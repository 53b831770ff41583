// `--set KEY=VALUE`: the input is the flag's value (each line one more --set).
#include "fuzz_support.hpp"

#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::istringstream in(rcl::fuzz::text_of(data, size));
  for (std::string line; std::getline(in, line);) args.insert(args.end(), {"--set", line});
  rcl::fuzz::parse_and_resolve(args);
  return 0;
}
