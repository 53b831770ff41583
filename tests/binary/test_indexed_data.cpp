// Training on an indexed dataset through the binary: shards of a real text (Debian's GPL-3, as
// byte tokens) train and the loss falls, the log and report.json name the data; a resume on them
// is bit-exact; a blend of two trains; a bad shard or a blend of two tokenizers is refused with
// exit 2 and one line naming the file, before the output directory exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/data.hpp"
#include "support/cli_runner.hpp"
#include "support/indexed_dataset_writer.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::read_text;
using testing::run_cli;

// The paragraphs of a text every Debian machine has, each a document of byte tokens.
std::vector<std::vector<int64_t>> licence_documents() {
  std::istringstream text(read_text("/usr/share/common-licenses/GPL-3"));
  std::vector<std::vector<int64_t>> docs;
  std::string paragraph, line;
  auto flush = [&] {
    if (paragraph.empty()) return;
    std::vector<int64_t> doc{byte_tokens::bos};
    for (unsigned char c : paragraph) doc.push_back(c);
    doc.push_back(byte_tokens::eos);
    docs.push_back(doc);
    paragraph.clear();
  };
  while (std::getline(text, line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) flush();
    else paragraph += line + "\n";
  }
  flush();
  return docs;
}

std::vector<double> losses(const fs::path& dir) {
  std::vector<double> out;
  std::istringstream lines(read_text(dir / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("loss") && record.contains("step")) out.push_back(record.at("loss").get<double>());
  }
  return out;
}

TEST(IndexedData, ShardsOfARealTextTrainAndTheReportNamesThem) {
  const auto docs = licence_documents();
  ASSERT_GT(docs.size(), 50u) << "/usr/share/common-licenses/GPL-3 is missing or short";
  const fs::path dir = fresh_dir("indexed", "train");
  const std::string prefix = dir.string() + "-gpl3";
  testing::write_indexed_dataset(prefix, docs);
  testing::write_sidecar(prefix, docs, byte_tokens::vocab_size);
  const auto r = run_cli(testing::kSmokeCpu + "--steps 30 --data " + prefix + ".idx --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(
      (r.out + r.err).find("indexed dataset '" + prefix + "' (uint16, " + std::to_string(docs.size()) + " documents"),
      std::string::npos)
      << r.out << r.err;
  const auto report = nlohmann::json::parse(read_text(dir / "report.json"));
  const auto& data = report.at("data");
  EXPECT_EQ(data.at("kind"), "indexed_dataset");
  EXPECT_EQ(data.at("path"), prefix);
  EXPECT_EQ(data.at("vocab_size"), byte_tokens::vocab_size);
  EXPECT_EQ(data.at("tokenizer_sha256"), std::string(64, 'a'));
  const auto loss = losses(dir);
  ASSERT_EQ(loss.size(), 30u);
  EXPECT_LT(loss.back(), loss.front() - 1.0) << "first " << loss.front() << ", last " << loss.back();
  fs::remove_all(dir);
  for (const char* ext : {".bin", ".idx", ".json"}) fs::remove(prefix + ext);
}

// A run on shards reads its tokens as a pure function of seed and step: stopped at a checkpoint
// and resumed, it trains on the same windows, loss for loss, as the run that never stopped.
TEST(IndexedData, AResumeOnShardsIsBitExact) {
  const auto docs = licence_documents();
  const fs::path straight = fresh_dir("indexed", "straight"), resumed = fresh_dir("indexed", "resumed");
  const std::string prefix = straight.string() + "-gpl3";
  testing::write_indexed_dataset(prefix, docs);
  testing::write_sidecar(prefix, docs, byte_tokens::vocab_size);
  const std::string args = testing::kSmokeCpu + "--steps 8 --checkpoint-interval 4 --data " + prefix + " ";
  const auto a = run_cli(args + "--output-dir " + straight.string());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto b = run_cli(args + "--resume " + (straight / "checkpoints" / "step-00000004").string() + " --output-dir " +
                         resumed.string());
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto whole = losses(straight), second_half = losses(resumed);
  ASSERT_EQ(whole.size(), 8u);
  EXPECT_EQ(second_half, std::vector<double>(whole.begin() + 4, whole.end()));
  fs::remove_all(straight);
  fs::remove_all(resumed);
  for (const char* ext : {".bin", ".idx", ".json"}) fs::remove(prefix + ext);
}

// Two halves of the text blended 3:1 (docs/data.md "Blending several datasets"): the run trains,
// its report names both parts at their shares; halves written as by another tokenizer are refused
// with exit 2, one line naming both, before the output directory exists.
TEST(IndexedData, ABlendTrainsOnItsPartsAndPartsOfTwoTokenizersAreRefused) {
  const auto docs = licence_documents();
  const fs::path dir = fresh_dir("indexed", "blend");
  const std::string first = dir.string() + "-first", second = dir.string() + "-second",
                    other = dir.string() + "-other";
  const auto middle = docs.begin() + std::ptrdiff_t(docs.size() / 2);
  const std::vector<std::vector<int64_t>> head(docs.begin(), middle), tail(middle, docs.end());
  testing::write_indexed_dataset(first, head);
  testing::write_sidecar(first, head, byte_tokens::vocab_size);
  testing::write_indexed_dataset(second, tail);
  testing::write_sidecar(second, tail, byte_tokens::vocab_size);
  testing::write_indexed_dataset(other, tail);
  testing::write_sidecar(other, tail, byte_tokens::vocab_size, std::string(64, 'b'));

  const auto r =
      run_cli(testing::kSmokeCpu + "--steps 20 --data '3 " + first + " 1 " + second + "' --output-dir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto data = nlohmann::json::parse(read_text(dir / "report.json")).at("data");
  EXPECT_EQ(data.at("kind"), "blend");
  ASSERT_EQ(data.at("parts").size(), 2u);
  EXPECT_EQ(data.at("parts")[0].at("path"), first);
  EXPECT_DOUBLE_EQ(data.at("parts")[0].at("share").get<double>(), 0.75);
  EXPECT_EQ(data.at("parts")[1].at("path"), second);
  const auto loss = losses(dir);
  ASSERT_EQ(loss.size(), 20u);
  EXPECT_LT(loss.back(), loss.front() - 1.0) << "first " << loss.front() << ", last " << loss.back();
  fs::remove_all(dir);

  const auto refused =
      run_cli(testing::kSmokeCpu + "--steps 2 --data '3 " + first + " 1 " + other + "' --output-dir " + dir.string());
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("share one tokenizer"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find(other), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir)) << "the refused run wrote " << dir;
  for (const auto& prefix : {first, second, other})
    for (const char* ext : {".bin", ".idx", ".json"}) fs::remove(prefix + ext);
}

TEST(IndexedData, ABadShardIsRefusedBeforeAnythingIsWritten) {
  const auto docs = licence_documents();
  const fs::path dir = fresh_dir("indexed", "refused");
  const std::string prefix = dir.string() + "-bad";
  // An id at or above the model's vocabulary: 259 byte tokens, and an id 300 in document 3.
  auto bad = docs;
  bad[3][5] = 300;
  testing::write_indexed_dataset(prefix, bad);
  const auto r =
      run_cli(testing::kSmokeCpu + "--steps 2 --set vocab_size=259 --data " + prefix + " --output-dir " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(prefix + ".bin': token"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("id 300"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir)) << "the refused run wrote " << dir;
  // No sidecar and no vocab_size: the line says what to set.
  const auto unnamed = run_cli(testing::kSmokeCpu + "--steps 2 --data " + prefix + " --output-dir " + dir.string());
  EXPECT_EQ(unnamed.exit_code, 2) << unnamed.out << unnamed.err;
  EXPECT_NE(unnamed.err.find("training.vocab_size"), std::string::npos) << unnamed.err;
  EXPECT_FALSE(fs::exists(dir));
  for (const char* ext : {".bin", ".idx"}) fs::remove(prefix + ext);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
