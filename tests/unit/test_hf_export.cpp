// The Hugging Face export's tokenizer in-process (workload/hf_names.hpp): config.json's special
// ids follow the data (none for the synthetic corpus, the byte tokenizer's for a text file, an
// indexed dataset's sidecar's, a blend's first part's), and the tokenizer.json the sidecar names
// is copied only while its SHA-256 is the sidecar's, with the tokenizer_config.json beside it or a
// minimal one, both read once and written by every export as read. Through the binary:
// tests/binary/test_checkpoints.cpp.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/hf_names.hpp"
#include "support/cli_runner.hpp"
#include "support/indexed_dataset_writer.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

namespace fs = std::filesystem;
using json = nlohmann::json;
using rcl::testing::fresh_dir;
using rcl::testing::read_text;

// A tokenizer.json of the shape `tokenizers` writes: special tokens among the added tokens, the
// rest in the BPE model's vocabulary.
const std::string kTokenizer = json{
    {"version", "1.0"},
    {"added_tokens",
     {{{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}},
      {{"id", 1}, {"content", "<s>"}, {"special", true}}}},
    {"model",
     {{"type", "BPE"},
      {"vocab", {{"<|endoftext|>", 0}, {"<s>", 1}, {"a", 2}, {"b", 3}, {"<pad>", 4}}},
      {"merges", json::array()}}}}.dump(2);

std::vector<std::vector<int64_t>> docs() { return {{1, 2, 3, 2, 0}, {1, 3, 3, 2, 2, 0}}; }

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("hf-export", "t");
    fs::create_directories(dir_ / "tok");
    fs::create_directories(dir_ / "out");
    tokenizer_ = dir_ / "tok" / "tokenizer.json";
    std::ofstream(tokenizer_) << kTokenizer;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Shards of docs() and a sidecar naming tokenizer_ (as prepare_data.py does: absolute path,
  // its SHA-256) and `special_ids`; returns PREFIX.
  std::string shards(const std::string& name, const json& special_ids) const {
    const std::string prefix = (dir_ / name).string();
    testing::write_indexed_dataset(prefix, docs());
    testing::write_sidecar(prefix, docs(), 5);
    auto sidecar = json::parse(read_text(prefix + ".json"));
    sidecar["tokenizer"] = {{"path", tokenizer_.string()}, {"sha256", sha256_of_file(tokenizer_.string())}};
    sidecar["special_ids"] = special_ids;
    std::ofstream(prefix + ".json") << sidecar.dump(2);
    return prefix;
  }
  static TrainingConfig on(const std::string& data_path) {
    TrainingConfig cfg;
    cfg.data_path = data_path;
    return cfg;
  }
  // The tokenizer of `data_path` read, then exported into out/ as a checkpoint does.
  json exported(const std::string& data_path) const {
    return export_tokenizer(read_hf_tokenizer(on(data_path)), dir_ / "out");
  }
  fs::path dir_, tokenizer_;
};

TEST_F(HfExportTest, SpecialIdsFollowTheData) {
  const json none = {{"bos_token_id", nullptr}, {"eos_token_id", nullptr}, {"pad_token_id", nullptr}};
  EXPECT_EQ(special_token_ids(on("")), none);
  const fs::path text = dir_ / "corpus.txt";
  std::ofstream(text) << "some text\n";
  EXPECT_EQ(special_token_ids(on(text.string())),
            (json{{"bos_token_id", 256}, {"eos_token_id", 257}, {"pad_token_id", 258}}));
  // An indexed dataset: its sidecar's ids, null where it names none.
  const std::string prefix = shards("shards", {{"bos", 1}, {"eos", 0}});
  const json sidecar_ids = {{"bos_token_id", 1}, {"eos_token_id", 0}, {"pad_token_id", nullptr}};
  EXPECT_EQ(special_token_ids(on(prefix)), sidecar_ids);
  EXPECT_EQ(special_token_ids(on(prefix + ".idx")), sidecar_ids);
  EXPECT_EQ(special_token_ids(on(shards("padded", {{"eos", 0}, {"pad", 4}}))),
            (json{{"bos_token_id", nullptr}, {"eos_token_id", 0}, {"pad_token_id", 4}}));
  // A blend (weights first) shares its first part's tokenizer.
  EXPECT_EQ(special_token_ids(on("0.3 " + prefix + " 0.7 " + (dir_ / "padded").string())), sidecar_ids);
  // Megatron's own shards have no sidecar: no ids known.
  fs::remove(prefix + ".json");
  EXPECT_EQ(special_token_ids(on(prefix)), none);
}

TEST_F(HfExportTest, TheTokenizerIsCopiedWithAMinimalConfigNamingItsSpecialTokens) {
  const std::string prefix = shards("shards", {{"bos", 1}, {"eos", 0}});
  const json record = exported(prefix);
  EXPECT_EQ(record["copied"], true) << record.dump();
  EXPECT_EQ(record["source"], tokenizer_.string());
  EXPECT_EQ(record["sha256"], sha256_of_file(tokenizer_.string()));
  EXPECT_EQ(record["tokenizer_config"], "written");
  EXPECT_EQ(read_text(dir_ / "out" / "tokenizer.json"), kTokenizer);
  EXPECT_EQ(
      json::parse(read_text(dir_ / "out" / "tokenizer_config.json")),
      (json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", "<s>"}, {"eos_token", "<|endoftext|>"}}));
  // A pad found only in the model's vocabulary.
  const json padded = exported(shards("padded", {{"eos", 0}, {"pad", 4}}));
  EXPECT_EQ(padded["copied"], true);
  EXPECT_EQ(
      json::parse(read_text(dir_ / "out" / "tokenizer_config.json")),
      (json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"eos_token", "<|endoftext|>"}, {"pad_token", "<pad>"}}));
}

TEST_F(HfExportTest, TheTokenizerConfigBesideTheTokenizerIsCopiedAsItIs) {
  const std::string config =
      R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": {"content": "<|endoftext|>"}})";
  std::ofstream(dir_ / "tok" / "tokenizer_config.json") << config;
  const json record = exported(shards("shards", {{"bos", 1}, {"eos", 0}}));
  EXPECT_EQ(record["tokenizer_config"], "copied") << record.dump();
  EXPECT_EQ(read_text(dir_ / "out" / "tokenizer_config.json"), config);
}

TEST_F(HfExportTest, AChangedOrMissingTokenizerIsNotCopied) {
  const std::string prefix = shards("shards", {{"bos", 1}, {"eos", 0}});
  std::ofstream(tokenizer_, std::ios::app) << " ";  // edited since the shards were written
  json record = exported(prefix);
  EXPECT_EQ(record["copied"], false) << record.dump();
  EXPECT_NE(record["why"].get<std::string>().find("its SHA-256 is " + sha256_of_file(tokenizer_.string())),
            std::string::npos)
      << record.dump();
  EXPECT_TRUE(fs::is_empty(dir_ / "out"));
  fs::remove(tokenizer_);
  record = exported(prefix);
  EXPECT_EQ(record["copied"], false);
  EXPECT_EQ(record["why"], "no such file");
  EXPECT_TRUE(fs::is_empty(dir_ / "out"));
  // Data that names no tokenizer file: nothing to record.
  EXPECT_TRUE(exported("").is_null());
  fs::remove(prefix + ".json");
  EXPECT_TRUE(exported(prefix).is_null());
}

TEST_F(HfExportTest, TheTokenizerIsReadOnceAndEveryExportWritesWhatWasRead) {
  const std::string prefix = shards("shards", {{"bos", 1}, {"eos", 0}});
  const HfTokenizer tokenizer = read_hf_tokenizer(on(prefix));
  EXPECT_EQ(tokenizer.special_ids, special_token_ids(on(prefix)));
  // Changed, then gone, after the run started: the checkpoints still carry it as it was read.
  std::ofstream(tokenizer_, std::ios::app) << " ";
  EXPECT_EQ(export_tokenizer(tokenizer, dir_ / "out")["copied"], true);
  fs::remove(tokenizer_);
  fs::create_directories(dir_ / "later");
  EXPECT_EQ(export_tokenizer(tokenizer, dir_ / "later")["copied"], true);
  EXPECT_EQ(read_text(dir_ / "later" / "tokenizer.json"), kTokenizer);
  EXPECT_EQ(read_text(dir_ / "later" / "tokenizer_config.json"), read_text(dir_ / "out" / "tokenizer_config.json"));
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
