// An independent safetensors reader, written from the format's spec (u64 little-endian header
// size, a JSON header, the raw bytes), so what the writer wrote is read by something that is not
// its own reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace rcl::testing {

inline std::string bytes_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct SpecTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
inline std::map<std::string, SpecTensor> spec_read(const std::filesystem::path& path) {
  const std::string file = bytes_of(path);
  EXPECT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[i]);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  std::map<std::string, SpecTensor> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
    out[name] = {info["dtype"], info["shape"].get<std::vector<int64_t>>(), file.substr(8 + n + begin, end - begin)};
  }
  return out;
}

}  // namespace rcl::testing
