// Writes a Megatron indexed dataset (PREFIX.bin + PREFIX.idx, the layout in
// rocm_conformance_llm/workload/indexed_dataset.hpp), one sequence per document, and
// optionally its sidecar PREFIX.json, so the reader can be tested on files written
// independently of it, corrupt ones included.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl::testing {

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// dtype_code: Megatron's (uint16 8, int32 4, ...); item_size: its bytes per token.
inline void write_indexed_dataset(const std::string& prefix, const std::vector<std::vector<int64_t>>& documents,
                                  uint8_t dtype_code = 8, int item_size = 2) {
  std::string bin, idx("MMIDIDX\0\0", 9);
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  for (const auto& doc : documents) {
    pointers.push_back(int64_t(bin.size()));
    lengths.push_back(int32_t(doc.size()));
    for (int64_t id : doc) {
      if (item_size == 2) put(bin, uint16_t(id));
      else if (item_size == 4) put(bin, int32_t(id));
      else put(bin, id);
    }
  }
  put(idx, uint64_t(1));
  put(idx, dtype_code);
  put(idx, uint64_t(documents.size()));
  put(idx, uint64_t(documents.size() + 1));
  for (auto l : lengths) put(idx, l);
  for (auto p : pointers) put(idx, p);
  for (size_t d = 0; d <= documents.size(); ++d) put(idx, int64_t(d));
  std::ofstream(prefix + ".bin", std::ios::binary) << bin;
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
}

// tokenizer_sha256: which tokenizer the sidecar says made the ids (a blend's parts must agree).
inline void write_sidecar(const std::string& prefix, const std::vector<std::vector<int64_t>>& documents,
                          int64_t vocab_size, const std::string& tokenizer_sha256 = std::string(64, 'a')) {
  int64_t tokens = 0, largest = 0;
  for (const auto& doc : documents)
    for (int64_t id : doc) ++tokens, largest = std::max(largest, id);
  const nlohmann::json doc = {{"vocab_size", vocab_size},
                              {"tokens", tokens},
                              {"documents", documents.size()},
                              {"largest_id", largest},
                              {"tokenizer", {{"path", "test"}, {"sha256", tokenizer_sha256}}},
                              {"special_ids", {{"eos", vocab_size - 1}}}};
  std::ofstream(prefix + ".json") << doc.dump(2);
}

}  // namespace rcl::testing
