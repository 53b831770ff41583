// Blends of several datasets (docs/data.md "Blending several datasets"): Megatron's
// "WEIGHT PATH ..." form parsed and its mistakes refused; the cycle gives every part its share,
// spread evenly, each part's samples in its own order; a blend reads each part's own windows, and
// a blend of one part is that dataset alone; parts of different tokenizers, missing or too short
// for their windows are refused.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "rocm_conformance_llm/data.hpp"
#include "support/config_error.hpp"
#include "support/indexed_dataset_writer.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
namespace fs = std::filesystem;

const torch::Device cpu(torch::kCPU);

using testing::config_error_of;

TEST(DataBlend, MegatronsWeightPathPairsAreTheBlendAndAnythingElseIsOnePath) {
  auto parts = data_parts("0.7 data/web 0.3 data/code");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].path, "data/web");
  EXPECT_DOUBLE_EQ(parts[0].weight, 0.7);
  EXPECT_EQ(parts[1].path, "data/code");
  EXPECT_DOUBLE_EQ(parts[1].weight, 0.3);
  for (const std::string one : {"data/corpus", "my corpus/text.jsonl", "data/2024 notes.txt"}) {
    parts = data_parts(one);
    ASSERT_EQ(parts.size(), 1u) << one;
    EXPECT_EQ(parts[0].path, one);
    EXPECT_EQ(parts[0].weight, 1);
  }
  struct Bad {
    const char* data;
    const char* named;
  };
  for (const Bad bad : {Bad{"0.5 a 0.5", "3 words do not pair up"}, Bad{"0.5 a -1 b", "weight '-1'"},
                        Bad{"0.5 a x b", "weight 'x'"}, Bad{"0 a 1 b", "weight '0'"}, Bad{"1 a nan b", "weight 'nan'"}}) {
    const auto msg = config_error_of([&] { data_parts(bad.data); });
    EXPECT_NE(msg.find(bad.named), std::string::npos) << bad.data << ": " << msg;
    EXPECT_NE(msg.find("WEIGHT PATH"), std::string::npos) << msg;
  }
}

TEST(DataBlend, EachPartGetsItsShareSpreadEvenlyItsSamplesInOrderAndOnePartIsTheIdentity) {
  const BlendCycle one({5.0});
  EXPECT_EQ(one.share(0), 1.0);
  for (int64_t s = 0; s < 2500; s += 7) {
    EXPECT_EQ(one.pick(s).part, 0);
    EXPECT_EQ(one.pick(s).sample, s);
  }
  struct Case {
    std::vector<double> weights;
    std::vector<int64_t> slots;  // of the 1000-sample cycle
  };
  for (const Case& c : {Case{{0.7, 0.3}, {700, 300}}, Case{{1, 2}, {333, 667}}, Case{{1, 1, 1}, {334, 333, 333}},
                        Case{{1e-9, 1e-9, 1}, {1, 1, 998}}}) {
    const BlendCycle cycle(c.weights);
    const int64_t parts = int64_t(c.weights.size()), samples = 3 * BlendCycle::kSlots;
    std::vector<int64_t> next(parts, 0);
    std::vector<int64_t> in_cycle(parts, 0);
    for (int64_t s = 0; s < samples; ++s) {
      const auto pick = cycle.pick(s);
      ASSERT_EQ(pick.sample, next[pick.part]++) << "part " << pick.part << " sample " << s;  // each part in order
      if (s < BlendCycle::kSlots) ++in_cycle[pick.part];
    }
    for (int64_t p = 0; p < parts; ++p) {
      EXPECT_EQ(in_cycle[p], c.slots[p]) << "part " << p;
      EXPECT_DOUBLE_EQ(cycle.share(int(p)), double(c.slots[p]) / BlendCycle::kSlots);
      EXPECT_EQ(next[p], 3 * c.slots[p]);
    }
  }
  // Spread evenly: every run of 10 samples of a 0.7/0.3 blend holds 3 of the second part.
  const BlendCycle cycle({0.7, 0.3});
  for (int64_t start = 0; start + 10 <= 2000; ++start) {
    int second = 0;
    for (int64_t s = start; s < start + 10; ++s) second += cycle.pick(s).part;
    ASSERT_GE(second, 2) << start;
    ASSERT_LE(second, 4) << start;
  }
}

class DataBlendFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rcl_test_blend_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Shards of ids in [first, first + 100), so each window tells which part it came from.
  std::string shards(const std::string& name, int64_t first, const std::string& sha = std::string(64, 'a')) {
    std::vector<std::vector<int64_t>> docs;
    for (int d = 0; d < 12; ++d) {
      std::vector<int64_t> doc;
      for (int i = 0; i < 7 + d % 3; ++i) doc.push_back(first + (d * 31 + i * 7) % 100);
      docs.push_back(doc);
    }
    const auto prefix = (dir_ / name).string();
    testing::write_indexed_dataset(prefix, docs);
    testing::write_sidecar(prefix, docs, 256, sha);
    return prefix;
  }
  fs::path dir_;
};

std::vector<int64_t> row(const Batch& b) {
  const auto r = torch::cat({b.inputs, b.targets.slice(1, -1)}, 1)[0].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

TEST_F(DataBlendFiles, ABlendReadsEachPartsOwnWindowsAtItsShareAndABlendOfOneIsTheDatasetAlone) {
  const auto low = shards("low", 0), high = shards("high", 100);
  const int64_t seq = 4;
  const TokenFile blend("3 " + low + " 1 " + high, 0.1, 7, 1, seq, 0, 1, cpu);
  const TokenFile low_alone(low, 0.1, 7, 1, seq, 0, 1, cpu), weighted_one("2.5 " + low, 0.1, 7, 1, seq, 0, 1, cpu);
  // A blend of one part is that dataset: the same windows in the same order, train and validation.
  for (int64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(row(weighted_one.train_batch(i)), row(low_alone.train_batch(i))) << i;
    EXPECT_EQ(row(weighted_one.val_batch(i)), row(low_alone.val_batch(i))) << i;
  }
  // 3:1 over a cycle: 750 windows of the low ids, 250 of the high, each window from one part.
  std::map<bool, int64_t> count;
  std::map<bool, std::set<std::vector<int64_t>>> seen;
  for (int64_t i = 0; i < BlendCycle::kSlots; ++i) {
    const auto tokens = row(blend.train_batch(i));
    const bool is_high = tokens[0] >= 100;
    for (int64_t t : tokens) ASSERT_EQ(t >= 100, is_high) << "a window mixes the parts at sample " << i;
    ++count[is_high];
    seen[is_high].insert(tokens);
  }
  EXPECT_EQ(count[false], 750);
  EXPECT_EQ(count[true], 250);
  // The low part's windows are the dataset's own training windows (the blend's part 0 is split
  // with the same stream as the dataset alone), each epoch of them whole.
  std::set<std::vector<int64_t>> alone;
  for (int64_t i = 0; i < 200; ++i) alone.insert(row(low_alone.train_batch(i)));
  EXPECT_EQ(seen[false], alone);
  // Validation draws from both parts too.
  std::set<bool> val_parts;
  for (int64_t i = 0; i < 8; ++i) val_parts.insert(row(blend.val_batch(i))[0] >= 100);
  EXPECT_EQ(val_parts.size(), 2u);

  const auto record = blend.record();
  EXPECT_EQ(record.at("kind"), "blend");
  ASSERT_EQ(record.at("parts").size(), 2u);
  EXPECT_EQ(record.at("parts")[0].at("path"), low);
  EXPECT_DOUBLE_EQ(record.at("parts")[0].at("share").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(record.at("parts")[1].at("weight").get<double>(), 1.0);
  EXPECT_EQ(record.at("tokens").get<int64_t>(), blend.token_count());
  EXPECT_EQ(low_alone.record().at("kind"), "indexed_dataset");  // one dataset's record is as it was
}

TEST_F(DataBlendFiles, PartsOfDifferentTokenizersOrAMissingOrShortPartAreRefusedNamingThem) {
  const WindowCut cut{.seq_len = 4, .val_fraction = 0.1, .seed = 1};
  const auto ours = shards("ours", 0), theirs = shards("theirs", 0, std::string(64, 'b'));
  auto msg = config_error_of([&] { open_data("1 " + ours + " 1 " + theirs, 0, cut); });
  EXPECT_NE(msg.find("share one tokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find(theirs), std::string::npos) << msg;
  const std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "plain text, byte tokens";
  msg = config_error_of([&] { open_data("1 " + ours + " 1 " + text, 0, cut); });
  EXPECT_NE(msg.find("share one tokenizer"), std::string::npos) << msg;
  msg = config_error_of([&] { open_data("1 " + ours + " 1 " + (dir_ / "absent").string(), 0, cut); });
  EXPECT_NE(msg.find((dir_ / "absent").string()), std::string::npos) << msg;
  // Two text files share the byte tokenizer; each part is cut into its own windows.
  const auto both = open_data("1 " + text + " 2 " + text, 0, cut);
  ASSERT_EQ(both->parts.size(), 2u);
  EXPECT_EQ(both->parts[1].given.weight, 2);
  EXPECT_EQ(both->parts[0].train_windows.size() + both->parts[0].val_windows.size(), 6u);  // (25 tokens - 1) / 4
  // A part too short for a training and a validation window, named.
  const std::string note = (dir_ / "note.txt").string();
  std::ofstream(note) << "short";
  msg = config_error_of([&] { open_data("1 " + text + " 1 " + note, 0, cut); });
  EXPECT_NE(msg.find("'" + note + "': 7 tokens make 1 window(s) of seq_len+1=5, need at least 2"), std::string::npos)
      << msg;
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
