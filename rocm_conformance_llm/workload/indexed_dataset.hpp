// A tokenized corpus in Megatron-LM's indexed-dataset format (what its
// tools/preprocess_data.py, NeMo and datatrove write; scripts/prepare_data.sh writes it here):
// PREFIX.bin holds the token ids back to back, no header; PREFIX.idx describes them:
//
//   "MMIDIDX\0\0" | u64 version (1) | u8 dtype code | u64 sequences S | u64 documents D
//   | i32 lengths[S] (tokens) | i64 pointers[S] (byte offsets into .bin) | i64 document_index[D]
//
// all little-endian; document_index is 0 and then the sequence count after each document, so
// D = documents + 1. Both files are memory-mapped: resident memory does not grow with the corpus.
// A sidecar PREFIX.json (written by scripts/prepare_data.sh) names the tokenizer and its
// vocabulary; Megatron's own output has none and needs training.vocab_size.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace rcl {

// PREFIX for `path`: PREFIX itself, or PREFIX.bin / PREFIX.idx.
std::string indexed_dataset_prefix(const std::string& path);
// Whether `path` names an indexed dataset (its .idx exists), not a text or JSONL file.
bool is_indexed_dataset(const std::string& path);

// The vocabulary of the indexed dataset at `path`, reading only its sidecar (cheap: the sizing
// asks it for every candidate of a fit): `configured` when > 0, else the sidecar's; a ConfigError
// when neither is known or `configured` is below an id the sidecar says the data holds.
int64_t indexed_dataset_vocab_size(const std::string& path, int64_t configured);

// The sidecar's facts the run checks the shards against (scripts/prepare_data.sh writes more).
struct IndexedSidecar {
  int64_t vocab_size = 0;
  int64_t tokens = 0;
  int64_t documents = 0;
  int64_t largest_id = 0;
  std::string tokenizer_path;  // as the sidecar names it (prepare_data.py: absolute); empty when it names none
  std::string tokenizer_sha256;
  nlohmann::json special_ids = nlohmann::json::object();  // {"bos": id, "eos": id, ...} as the tokenizer has them
};

// The sidecar of the indexed dataset at `path` (PREFIX, PREFIX.bin or PREFIX.idx), its fields
// checked as the reader checks them: nullopt where it has none; a ConfigError when it is malformed.
std::optional<IndexedSidecar> indexed_dataset_sidecar(const std::string& path);

class IndexedDataset {
 public:
  // Opens and checks PREFIX.idx and PREFIX.bin (and PREFIX.json where it exists): every problem
  // is a ConfigError naming the file and what is wrong (bad magic or version, an unknown or
  // non-integer dtype, sizes that disagree with the index, a sidecar that does not match).
  explicit IndexedDataset(const std::string& path);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return documents_; }
  const char* dtype_name() const;
  const std::optional<IndexedSidecar>& sidecar() const { return sidecar_; }
  // indexed_dataset_vocab_size's answer, from the sidecar already read.
  int64_t vocab_size(int64_t configured) const;
  // Reads `count` tokens from token `start` of the stream (documents back to back).
  void read(int64_t start, int64_t count, int64_t* out) const;
  // Every id in [0, vocab): a ConfigError naming the first one outside, else nothing. One pass
  // over the mapped tokens.
  void check_ids_below(int64_t vocab) const;

 private:
  struct Mapping;
  void check_sidecar();  // reads PREFIX.json, where it exists, into sidecar_, checked against the shards
  std::string prefix_;
  int dtype_code_ = 0;
  int64_t item_size_ = 0;
  int64_t tokens_ = 0;
  int64_t documents_ = 0;
  std::unique_ptr<Mapping> bin_;
  std::optional<IndexedSidecar> sidecar_;
};

}  // namespace rcl
