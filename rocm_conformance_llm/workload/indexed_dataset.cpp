#include "rocm_conformance_llm/workload/indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

// Megatron's DType codes that hold token ids (its float32/float64 codes, 7 and 6, do not).
struct TokenDtype {
  int code;
  const char* name;
  int64_t size;
};
constexpr TokenDtype kTokenDtypes[] = {{1, "uint8", 1}, {2, "int8", 1},  {3, "int16", 2},
                                       {4, "int32", 4}, {5, "int64", 8}, {8, "uint16", 2}};

const TokenDtype* token_dtype(int code) {
  for (const auto& d : kTokenDtypes)
    if (d.code == code) return &d;
  return nullptr;
}

template <typename T>
void copy_as(const unsigned char* base, int64_t start, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, base + (start + i) * int64_t(sizeof(T)), sizeof(T));
    out[i] = int64_t(value);
  }
}

// Tokens [start, start + count) of a .bin of dtype `code` as int64: one dispatch per call, not per token.
void read_tokens(int code, const unsigned char* base, int64_t start, int64_t count, int64_t* out) {
  switch (code) {
    case 1: return copy_as<uint8_t>(base, start, count, out);
    case 2: return copy_as<int8_t>(base, start, count, out);
    case 3: return copy_as<int16_t>(base, start, count, out);
    case 4: return copy_as<int32_t>(base, start, count, out);
    case 5: return copy_as<int64_t>(base, start, count, out);
    default: return copy_as<uint16_t>(base, start, count, out);
  }
}

template <typename T>
T field_at(const unsigned char* bytes, int64_t offset) {
  T value;
  std::memcpy(&value, bytes + offset, sizeof(T));
  return value;
}

IndexedSidecar read_sidecar(const std::string& path) {
  auto fail = [&](const std::string& what) { return ConfigError("invalid data_path sidecar '" + path + "': " + what); };
  std::ifstream in(path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("not valid JSON (") + e.what() + ")");
  }
  IndexedSidecar s;
  try {
    s.vocab_size = doc.at("vocab_size").get<int64_t>();
    s.tokens = doc.at("tokens").get<int64_t>();
    s.documents = doc.at("documents").get<int64_t>();
    s.largest_id = doc.at("largest_id").get<int64_t>();
    s.tokenizer_path = doc.at("tokenizer").value("path", "");
    s.tokenizer_sha256 = doc.at("tokenizer").at("sha256").get<std::string>();
    s.special_ids = doc.value("special_ids", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("missing or mistyped field (") + e.what() + ")");
  }
  if (s.vocab_size <= 0) throw fail(fmt::format("vocab_size={} (must be > 0)", s.vocab_size));
  return s;
}

// The vocabulary of the data at `prefix`: `configured` when set (and holding the sidecar's largest
// id), else the sidecar's.
int64_t vocab_of(const std::string& prefix, const std::optional<IndexedSidecar>& sidecar, int64_t configured) {
  if (configured > 0) {
    if (sidecar && sidecar->largest_id >= configured)
      throw ConfigError(
          fmt::format("invalid vocab_size={}: '{}.json' says the data holds id {} (its tokenizer's "
                      "vocabulary is {}; 0 = take it from the data)",
                      configured, prefix, sidecar->largest_id, sidecar->vocab_size));
    return configured;
  }
  if (!sidecar)
    throw ConfigError("invalid data_path '" + prefix +
                      "': no sidecar PREFIX.json names its vocabulary; set training.vocab_size (or write the shards "
                      "with scripts/prepare_data.sh)");
  return sidecar->vocab_size;
}

std::optional<IndexedSidecar> sidecar_of(const std::string& prefix) {
  std::error_code ec;
  if (!fs::is_regular_file(prefix + ".json", ec)) return std::nullopt;
  return read_sidecar(prefix + ".json");
}

}  // namespace

// A read-only memory mapping of a whole file.
struct IndexedDataset::Mapping {
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ConfigError("invalid data_path '" + path + "': cannot be opened");
    struct stat st {};
    ::fstat(fd, &st);
    bytes = int64_t(st.st_size);
    if (bytes > 0) data = ::mmap(nullptr, size_t(bytes), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) throw ConfigError("invalid data_path '" + path + "': cannot be memory-mapped");
  }
  ~Mapping() {
    if (data && data != MAP_FAILED) ::munmap(data, size_t(bytes));
  }
  const unsigned char* base() const { return static_cast<const unsigned char*>(data); }
  void* data = nullptr;
  int64_t bytes = 0;
};

std::string indexed_dataset_prefix(const std::string& path) {
  const fs::path p(path);
  if (p.extension() == ".bin" || p.extension() == ".idx") return (p.parent_path() / p.stem()).string();
  return path;
}

bool is_indexed_dataset(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(indexed_dataset_prefix(path) + ".idx", ec);
}

namespace {

ConfigError bad_file(const std::string& file, const std::string& what) {
  return ConfigError("invalid data_path '" + file + "': " + what);
}

// What the index's fixed header says, each field checked against the file's size.
struct IndexHeader {
  const TokenDtype* dtype = nullptr;
  int64_t sequences = 0;
  int64_t doc_entries = 0;
};

IndexHeader check_header(const std::string& path, const unsigned char* idx, int64_t bytes) {
  if (bytes < kHeaderBytes || std::memcmp(idx, kMagic, sizeof kMagic) != 0)
    throw bad_file(path, "not a Megatron indexed dataset index (no \"MMIDIDX\" header)");
  if (const auto version = field_at<uint64_t>(idx, 9); version != 1)
    throw bad_file(path, fmt::format("index version {} (this reader knows version 1)", version));
  IndexHeader h{.dtype = token_dtype(int(idx[17])),
                .sequences = int64_t(field_at<uint64_t>(idx, 18)),
                .doc_entries = int64_t(field_at<uint64_t>(idx, 26))};
  if (!h.dtype)
    throw bad_file(path, fmt::format("dtype code {} is not an integer token type (uint8 1, int8 2, int16 3, int32 4, "
                                     "int64 5, uint16 8)",
                                     int(idx[17])));
  // Counts larger than the file are refused before their tables' sizes are computed.
  if (h.sequences < 0 || h.sequences > bytes || h.doc_entries < 1 || h.doc_entries > bytes)
    throw bad_file(path, fmt::format("{} bytes cannot hold the {} sequences and {} document entries its header says",
                                     bytes, h.sequences, h.doc_entries));
  // A multimodal index adds one mode byte per sequence; a text corpus has none.
  const int64_t expected = kHeaderBytes + 12 * h.sequences + 8 * h.doc_entries;
  if (bytes != expected && bytes != expected + h.sequences)
    throw bad_file(path, fmt::format("{} bytes, but its header's {} sequences and {} document entries make {}", bytes,
                                     h.sequences, h.doc_entries, expected));
  return h;
}

// The sequences lie back to back from byte 0: returns the bytes they take.
int64_t check_sequences(const std::string& path, const unsigned char* idx, const IndexHeader& h) {
  int64_t offset = 0;
  for (int64_t s = 0; s < h.sequences; ++s) {
    const auto length = field_at<int32_t>(idx, kHeaderBytes + 4 * s);
    const auto pointer = field_at<int64_t>(idx, kHeaderBytes + 4 * h.sequences + 8 * s);
    if (length < 0 || pointer != offset)
      throw bad_file(path, fmt::format("sequence {} has length {} at byte {} where the lengths before it end at {}", s,
                                       length, pointer, offset));
    offset += int64_t(length) * h.dtype->size;
  }
  return offset;
}

void check_documents(const std::string& path, const unsigned char* idx, const IndexHeader& h) {
  const int64_t docs_at = kHeaderBytes + 12 * h.sequences;
  int64_t previous = -1;
  for (int64_t d = 0; d < h.doc_entries; ++d) {
    const auto at = field_at<int64_t>(idx, docs_at + 8 * d);
    if ((d == 0 && at != 0) || at < previous || at > h.sequences || (d + 1 == h.doc_entries && at != h.sequences))
      throw bad_file(path, fmt::format("document index entry {} is {}: it must rise from 0 to the {} sequences", d, at,
                                       h.sequences));
    previous = at;
  }
}

}  // namespace

IndexedDataset::IndexedDataset(const std::string& path) : prefix_(indexed_dataset_prefix(path)) {
  const std::string idx_path = prefix_ + ".idx", bin_path = prefix_ + ".bin";
  std::error_code ec;
  for (const auto& file : {idx_path, bin_path})
    if (!fs::is_regular_file(file, ec))
      throw bad_file(file, "not a readable regular file (an indexed dataset is PREFIX.bin + PREFIX.idx)");
  // Mapped, not read: an index holds 12 bytes per document, a gigabyte for a large corpus.
  const Mapping index(idx_path);
  const IndexHeader header = check_header(idx_path, index.base(), index.bytes);
  dtype_code_ = header.dtype->code;
  item_size_ = header.dtype->size;
  bin_ = std::make_unique<Mapping>(bin_path);
  const int64_t used = check_sequences(idx_path, index.base(), header);
  if (used != bin_->bytes)
    throw bad_file(bin_path, fmt::format("{} bytes, but the index's sequences make {} ({} tokens of {})", bin_->bytes,
                                         used, used / item_size_, header.dtype->name));
  check_documents(idx_path, index.base(), header);
  tokens_ = used / item_size_;
  documents_ = header.doc_entries - 1;
  if (tokens_ == 0) throw bad_file(bin_path, "holds no tokens");
  check_sidecar();
}

void IndexedDataset::check_sidecar() {
  sidecar_ = sidecar_of(prefix_);
  if (!sidecar_) return;
  const std::string path = prefix_ + ".json";
  if (sidecar_->tokens != tokens_ || sidecar_->documents != documents_)
    throw bad_file(path, fmt::format("says {} tokens in {} documents, the shards hold {} in {}", sidecar_->tokens,
                                     sidecar_->documents, tokens_, documents_));
  if (sidecar_->largest_id >= sidecar_->vocab_size)
    throw bad_file(
        path, fmt::format("largest_id {} is not below its vocab_size {}", sidecar_->largest_id, sidecar_->vocab_size));
}

IndexedDataset::~IndexedDataset() = default;

const char* IndexedDataset::dtype_name() const { return token_dtype(dtype_code_)->name; }

std::optional<IndexedSidecar> indexed_dataset_sidecar(const std::string& path) {
  return sidecar_of(indexed_dataset_prefix(path));
}

int64_t indexed_dataset_vocab_size(const std::string& path, int64_t configured) {
  const std::string prefix = indexed_dataset_prefix(path);
  return vocab_of(prefix, sidecar_of(prefix), configured);
}

int64_t IndexedDataset::vocab_size(int64_t configured) const { return vocab_of(prefix_, sidecar_, configured); }

void IndexedDataset::read(int64_t start, int64_t count, int64_t* out) const {
  read_tokens(dtype_code_, bin_->base(), start, count, out);
}

void IndexedDataset::check_ids_below(int64_t vocab) const {
  std::vector<int64_t> chunk(int64_t{1} << 16);
  for (int64_t start = 0; start < tokens_; start += int64_t(chunk.size())) {
    const int64_t count = std::min<int64_t>(int64_t(chunk.size()), tokens_ - start);
    read(start, count, chunk.data());
    for (int64_t i = 0; i < count; ++i)
      if (chunk[i] < 0 || chunk[i] >= vocab)
        throw ConfigError(
            fmt::format("invalid data_path '{}.bin': token {} is id {}, outside the model's vocabulary [0, {})",
                        prefix_, start + i, chunk[i], vocab));
  }
}

}  // namespace rcl
