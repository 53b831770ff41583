// A memory figure as the platform reports it; a step's record carries one.
#pragma once

#include <cstdint>
#include <string>

namespace rcl {

// Memory in use. Device allocator figures when the libtorch version exposes them, otherwise
// the process's resident set: `source` says which, so no number is ever faked.
struct MemorySample {
  int64_t allocated_bytes = -1;  // -1: not available from this source
  int64_t reserved_bytes = -1;
  int64_t peak_allocated_bytes = -1;
  int64_t rss_bytes = -1;  // process resident set, always read
  std::string source;      // "accelerator" | "hip" | "rss"
};

}  // namespace rcl
