// SHA-256 (FIPS 180-4) for checkpoint manifests: a small self-contained implementation, so
// verifying a checkpoint needs no crypto library at build or run time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rcl {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::string hex_digest();  // 64 lowercase hex digits; call once

 private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// The digest of a whole file, read in chunks; std::runtime_error when it cannot be read.
std::string sha256_of_file(const std::string& path);

}  // namespace rcl
