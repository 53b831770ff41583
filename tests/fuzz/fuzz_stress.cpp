// `--stress MODES`: the input is the flag's value (comma-separated modes, `all`, levels).
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rcl::fuzz::parse_and_resolve({"--stress", rcl::fuzz::text_of(data, size)});
  return 0;
}
