// Safetensors, written and read from the format's spec (huggingface/safetensors README): an
// 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:
// [begin, end)}, "__metadata__": {string: string}}, then the raw little-endian tensor bytes,
// back to back. Our own ~200 lines instead of a Rust library; checkpoints use it so other tools
// (transformers, safetensors.torch.load_file) read our weights.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl {

// A file that is not valid safetensors (truncated, bad header, offsets that do not tile the
// data, unknown dtype): refused with the file and the reason, never read past its end.
struct SafetensorsError : ConfigError {
  using ConfigError::ConfigError;
};

struct SafetensorsFile {
  std::map<std::string, torch::Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;
};

// Writes the tensors (copied to CPU, contiguous) in the order given, fsynced. Throws
// std::runtime_error naming the file when the disk refuses a byte.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

SafetensorsFile read_safetensors(const std::filesystem::path& path);

}  // namespace rcl
