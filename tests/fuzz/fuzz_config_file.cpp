// `--config FILE`: the input is the file (JSON, every key at every level checked).
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = rcl::fuzz::scratch() / "config.json";
  rcl::fuzz::write_file(path, rcl::fuzz::text_of(data, size));
  rcl::fuzz::parse_and_resolve({"--config", path.string()});
  return 0;
}
