#include "rocm_conformance_llm/base/safetensors.hpp"

#include <bit>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/files.hpp"

namespace rcl {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// The spec's dtype names for what a checkpoint holds.
constexpr std::pair<const char*, c10::ScalarType> kSafetensorsDtypes[] = {
    {"F64", c10::ScalarType::Double},    {"F32", c10::ScalarType::Float}, {"F16", c10::ScalarType::Half},
    {"BF16", c10::ScalarType::BFloat16}, {"I64", c10::ScalarType::Long},  {"I32", c10::ScalarType::Int},
    {"I16", c10::ScalarType::Short},     {"I8", c10::ScalarType::Char},   {"U8", c10::ScalarType::Byte},
    {"BOOL", c10::ScalarType::Bool}};

const char* safetensors_dtype_name(c10::ScalarType type) {
  for (const auto& [name, t] : kSafetensorsDtypes)
    if (t == type) return name;
  throw std::runtime_error(fmt::format("safetensors: no dtype name for {}", c10::toString(type)));
}

// Headers above this are refused before allocating (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    auto cpu = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = cpu.numel() * cpu.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(cpu.scalar_type())},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the spec allows trailing spaces; aligns the data
  const uint64_t length = text.size();
  char length_bytes[8];
  std::memcpy(length_bytes, &length, 8);
  std::vector<std::string_view> chunks{{length_bytes, 8}, text};
  for (const auto& t : data) chunks.emplace_back(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  write_file_synced(path, chunks);
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  const auto bad = [&](const std::string& why) {
    return SafetensorsError(fmt::format("{}: not a valid safetensors file: {}", path.string(), why));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw bad("cannot be read");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  uint64_t header_size = 0;
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(&header_size), 8))
    throw bad("shorter than its 8-byte header length");
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8)
    throw bad(fmt::format("header length {} does not fit the file ({} bytes)", header_size, file_size));
  std::string text(header_size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(header_size))) throw bad("truncated header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("header is not a JSON object");

  SafetensorsFile out;
  const uint64_t data_size = file_size - 8 - header_size;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  struct Entry {
    std::string name;
    c10::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin;
  };
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) throw bad("__metadata__." + key + " is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets") ||
        !info["dtype"].is_string() || !info["shape"].is_array() || !info["data_offsets"].is_array() ||
        info["data_offsets"].size() != 2)
      throw bad("tensor '" + name + "' lacks dtype, shape or data_offsets [begin, end]");
    const auto dtype_text = info["dtype"].get<std::string>();
    const auto* known = std::find_if(std::begin(kSafetensorsDtypes), std::end(kSafetensorsDtypes),
                                     [&](const auto& d) { return dtype_text == d.first; });
    if (known == std::end(kSafetensorsDtypes))
      throw bad("tensor '" + name + "' has unsupported dtype '" + dtype_text + "'");
    Entry e{name, known->second, {}, 0};
    uint64_t numel = 1;
    for (const auto& dim : info["shape"]) {
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (uint64_t(1) << 40))
        throw bad("tensor '" + name + "' has a bad shape " + info["shape"].dump());
      e.shape.push_back(dim.get<int64_t>());
      numel *= dim.get<uint64_t>();
      if (numel > data_size) throw bad("tensor '" + name + "' is larger than the file's data");
    }
    const auto& offsets = info["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw bad("tensor '" + name + "' has bad data_offsets");
    const uint64_t begin = offsets[0], end = offsets[1];
    const uint64_t bytes = numel * c10::elementSize(e.dtype);
    if (begin > end || end > data_size || end - begin != bytes)
      throw bad(
          fmt::format("tensor '{}': data_offsets [{}, {}) do not hold {} bytes of {} {} within the {} data "
                      "bytes",
                      name, begin, end, bytes, dtype_text, info["shape"].dump(), data_size));
    e.begin = begin;
    spans.emplace_back(begin, end);
    entries.push_back(std::move(e));
  }
  // The spec: the tensors' byte ranges tile the data exactly (no holes, no overlaps).
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : spans) {
    if (begin != covered) throw bad("tensor data has a hole or an overlap");
    covered = end;
  }
  if (covered != data_size) throw bad(fmt::format("{} data bytes, tensors cover {}", data_size, covered));

  std::string data(data_size, '\0');
  if (!in.read(data.data(), static_cast<std::streamsize>(data_size))) throw bad("truncated data");
  for (const auto& e : entries) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    std::memcpy(t.data_ptr(), data.data() + e.begin, t.numel() * t.element_size());
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace rcl
