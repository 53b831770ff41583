// Indexed datasets (Megatron's PREFIX.bin + PREFIX.idx, written here by an independent writer):
// the tokens read back whole in both dtypes, the windows, split and order the text source has
// (docs/data.md), the vocabulary from the sidecar, and each corrupt or mismatched file refused
// with a message naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/workload/indexed_dataset.hpp"
#include "support/config_error.hpp"
#include "support/indexed_dataset_writer.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
namespace fs = std::filesystem;

const torch::Device cpu(torch::kCPU);

class IndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rcl_test_indexed_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string prefix(const std::string& name) const { return (dir_ / name).string(); }
  static std::string refusal(const std::string& path, int64_t vocab = 0) {
    return testing::config_error_of([&] { TokenFile(path, 0.0, 1, 1, 4, 0, 1, cpu, vocab); });
  }
  fs::path dir_;
};

// Documents of ids below `vocab`, their lengths varied.
std::vector<std::vector<int64_t>> documents(int64_t vocab, int count) {
  std::vector<std::vector<int64_t>> docs;
  int64_t next = 1;
  for (int d = 0; d < count; ++d) {
    std::vector<int64_t> doc;
    for (int i = 0; i < 5 + 3 * (d % 4); ++i) doc.push_back((next = (next * 48271 + 11) % vocab));
    docs.push_back(doc);
  }
  return docs;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& docs) {
  std::vector<int64_t> out;
  for (const auto& d : docs) out.insert(out.end(), d.begin(), d.end());
  return out;
}

// Every training window of one epoch, each as its seq_len + 1 tokens.
std::multiset<std::vector<int64_t>> one_epoch(const TokenFile& data, int64_t windows) {
  std::multiset<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < windows; ++i) {
    const auto b = data.train_batch(i);
    const auto row = torch::cat({b.inputs, b.targets.slice(1, -1)}, 1)[0].contiguous();
    seen.emplace(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  return seen;
}

// uint16 (what a vocabulary under 65,500 is written as) and int32 (Llama 3's 128,256 ids).
TEST_F(IndexedDatasetTest, BothDtypesReadBackAsTheStreamOfTheirDocumentsInWindows) {
  struct Kind {
    const char* name;
    uint8_t code;
    int size;
    int64_t vocab;
  };
  for (const Kind k : {Kind{"uint16", 8, 2, 50257}, Kind{"int32", 4, 4, 128256}}) {
    const auto docs = documents(k.vocab, 9);
    const auto p = prefix(k.name);
    testing::write_indexed_dataset(p, docs, k.code, k.size);
    testing::write_sidecar(p, docs, k.vocab);
    const IndexedDataset shards(p + ".bin");  // PREFIX, PREFIX.bin and PREFIX.idx name the same data
    EXPECT_EQ(shards.prefix(), p);
    EXPECT_STREQ(shards.dtype_name(), k.name);
    EXPECT_EQ(shards.documents(), 9);
    const auto stream = flat(docs);
    ASSERT_EQ(shards.tokens(), int64_t(stream.size()));
    std::vector<int64_t> read(stream.size());
    shards.read(0, shards.tokens(), read.data());
    EXPECT_EQ(read, stream) << k.name;
    EXPECT_NO_THROW(shards.check_ids_below(k.vocab));

    const int64_t seq = 4, windows = (int64_t(stream.size()) - 1) / seq;
    TokenFile data(p, 0.0, 1, 1, seq, 0, 1, cpu);
    EXPECT_EQ(data.vocab_size(), k.vocab);  // from the sidecar
    EXPECT_EQ(data.token_count(), int64_t(stream.size()));
    std::multiset<std::vector<int64_t>> expected;
    for (int64_t w = 0; w < windows; ++w)
      expected.emplace(stream.begin() + w * seq, stream.begin() + w * seq + seq + 1);
    EXPECT_EQ(one_epoch(data, windows), expected) << k.name;
    EXPECT_NE(data.describe().find("indexed dataset"), std::string::npos) << data.describe();
  }
}

// The same token stream, from a JSONL file or from shards of its byte tokens, gives the same
// batches: one definition of windows, split and order (docs/data.md) for every file source.
TEST_F(IndexedDatasetTest, ShardsOfAFilesTokensTrainOnTheFilesBatches) {
  const std::string jsonl = prefix("docs.jsonl");
  std::ofstream(jsonl) << "{\"text\": \"the quick brown fox\"}\n{\"text\": \"jumps over the lazy dog\"}\n"
                       << "{\"text\": \"and back again, twice\"}\n";
  std::vector<std::vector<int64_t>> docs;
  for (const std::string text : {"the quick brown fox", "jumps over the lazy dog", "and back again, twice"}) {
    std::vector<int64_t> doc{byte_tokens::bos};
    for (unsigned char c : text) doc.push_back(c);
    doc.push_back(byte_tokens::eos);
    docs.push_back(doc);
  }
  const auto p = prefix("bytes");
  testing::write_indexed_dataset(p, docs);
  testing::write_sidecar(p, docs, byte_tokens::vocab_size);
  const TokenFile text(jsonl, 0.2, 5, 2, 6, 1, 2, cpu), shards(p, 0.2, 5, 2, 6, 1, 2, cpu);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(torch::equal(text.train_batch(i).inputs, shards.train_batch(i).inputs)) << i;
    EXPECT_TRUE(torch::equal(text.val_batch(i).targets, shards.val_batch(i).targets)) << i;
  }
}

TEST_F(IndexedDatasetTest, TheVocabularyComesFromTheSidecarOrTheConfigAndMustHoldEveryId) {
  const auto docs = documents(1000, 6);
  const auto p = prefix("v");
  testing::write_indexed_dataset(p, docs);
  // No sidecar (Megatron's own output): the config must say the vocabulary.
  auto msg = refusal(p);
  EXPECT_NE(msg.find("training.vocab_size"), std::string::npos) << msg;
  EXPECT_EQ(TokenFile(p, 0.0, 1, 1, 4, 0, 1, cpu, 1000).vocab_size(), 1000);
  const IndexedDataset bare(p);
  int64_t largest = 0;
  for (int64_t id : flat(docs)) largest = std::max(largest, id);
  EXPECT_NO_THROW(bare.check_ids_below(largest + 1));
  msg = testing::config_error_of([&] { bare.check_ids_below(largest); });
  EXPECT_NE(msg.find(p + ".bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("id " + std::to_string(largest)), std::string::npos) << msg;

  testing::write_sidecar(p, docs, 1000);
  TrainingConfig cfg;
  cfg.data_path = p;
  cfg.seq_len = 4;
  cfg.batch_size = 1;
  EXPECT_EQ(resolved_vocab_size(cfg), 1000);
  EXPECT_EQ(make_data_source(cfg, 0, 1, cpu)->vocab_size(), 1000);
  msg = refusal(p, largest);  // a configured vocabulary the data does not fit
  EXPECT_NE(msg.find("vocab_size=" + std::to_string(largest)), std::string::npos) << msg;
}

// Each defect a shard can have, each refused naming the file and what is wrong.
TEST_F(IndexedDatasetTest, CorruptShortAndMismatchedFilesAreRefusedNamingTheFileAndTheProblem) {
  const auto docs = documents(500, 5);
  auto fresh = [&](const std::string& name) {
    const auto p = prefix(name);
    testing::write_indexed_dataset(p, docs);
    testing::write_sidecar(p, docs, 500);
    return p;
  };
  auto patch_idx = [](const std::string& p, size_t offset, const std::string& bytes) {
    std::fstream f(p + ".idx", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(offset));
    f.write(bytes.data(), std::streamsize(bytes.size()));
  };
  auto expect_refused = [&](const std::string& p, const std::string& file, const std::string& what) {
    const auto msg = refusal(p);
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };

  auto p = fresh("magic");
  patch_idx(p, 0, "XXIDIDX");
  expect_refused(p, p + ".idx", "MMIDIDX");
  p = fresh("version");
  patch_idx(p, 9, std::string("\x02", 1));
  expect_refused(p, p + ".idx", "version 2");
  p = fresh("float");
  patch_idx(p, 17, std::string("\x07", 1));  // float32
  expect_refused(p, p + ".idx", "dtype code 7");
  p = fresh("short_index");
  fs::resize_file(p + ".idx", fs::file_size(p + ".idx") - 8);
  expect_refused(p, p + ".idx", "bytes");
  p = fresh("short_bin");
  fs::resize_file(p + ".bin", fs::file_size(p + ".bin") - 2);
  expect_refused(p, p + ".bin", "bytes");
  p = fresh("pointer");
  patch_idx(p, 9 + 8 + 1 + 8 + 8 + 4 * docs.size() + 8, std::string(8, '\x01'));  // sequence 1's offset
  expect_refused(p, p + ".idx", "sequence 1");
  p = fresh("documents");
  patch_idx(p, 9 + 8 + 1 + 8 + 8 + 12 * docs.size() + 8 * docs.size(), std::string(8, '\0'));  // last entry 0
  expect_refused(p, p + ".idx", "document index");
  p = fresh("sidecar");
  testing::write_sidecar(p, {docs[0]}, 500);
  expect_refused(p, p + ".json", "tokens");
  p = fresh("no_bin");
  fs::remove(p + ".bin");
  expect_refused(p, p + ".bin", "not a readable regular file");
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
