// Data: the synthetic corpus's exact floor against a Monte-Carlo run of the ideal predictor,
// its copy structure, determinism, disjoint rank shards, and the byte-level file sources
// with their error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "rocm_conformance_llm/data.hpp"
#include "support/config_error.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {
namespace fs = std::filesystem;

const torch::Device cpu(torch::kCPU);

SyntheticCorpus corpus(int64_t batch = 8, int64_t seq = 64, int rank = 0, int world = 1, uint64_t seed = 7) {
  return SyntheticCorpus(SyntheticSpec{}, seed, batch, seq, rank, world, cpu);
}

std::vector<std::vector<int64_t>> rows_of(const torch::Tensor& t) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < t.size(0); ++r) {
    const auto row = t[r].contiguous();
    rows.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  return rows;
}

TEST(SyntheticCorpus, BatchesAreShiftedWindowsOnTheDevice) {
  const auto data = corpus(4, 32);
  const Batch b = data.train_batch(0);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(b.targets.sizes(), b.inputs.sizes());
  EXPECT_EQ(b.copy_mask.sizes(), b.inputs.sizes());
  EXPECT_EQ(b.inputs.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.inputs.slice(1, 1), b.targets.slice(1, 0, 31)));
  EXPECT_LT(b.inputs.max().item<int64_t>(), data.vocab_size());
}

TEST(SyntheticCorpus, SameSeedSameDataOtherSeedOtherData) {
  const auto a = corpus(), b = corpus(), other = corpus(8, 64, 0, 1, 8);
  EXPECT_TRUE(torch::equal(a.train_batch(3).inputs, b.train_batch(3).inputs));
  EXPECT_FALSE(torch::equal(a.train_batch(3).inputs, a.train_batch(4).inputs));
  EXPECT_FALSE(torch::equal(a.train_batch(3).inputs, other.train_batch(3).inputs));
  EXPECT_FALSE(torch::equal(a.train_batch(0).inputs, a.val_batch(0).inputs));  // separate streams
  EXPECT_DOUBLE_EQ(*a.loss_floor(), *b.loss_floor());
}

// Two ranks of batch B together read exactly what one rank of batch 2B reads: disjoint
// shards that cover the same data.
TEST(SyntheticCorpus, RankShardsAreDisjointAndCoverTheSingleRankStream) {
  const auto rank0 = corpus(4, 32, 0, 2), rank1 = corpus(4, 32, 1, 2), single = corpus(8, 32, 0, 1);
  for (int64_t index : {0, 5}) {
    auto r0 = rows_of(rank0.train_batch(index).inputs), r1 = rows_of(rank1.train_batch(index).inputs);
    std::set<std::vector<int64_t>> s0(r0.begin(), r0.end()), s1(r1.begin(), r1.end());
    for (const auto& row : s0) EXPECT_EQ(s1.count(row), 0u);
    std::set<std::vector<int64_t>> both = s0;
    both.insert(s1.begin(), s1.end());
    const auto whole = rows_of(single.train_batch(index).inputs);
    EXPECT_EQ(both, std::set<std::vector<int64_t>>(whole.begin(), whole.end()));
  }
  // Validation is the same on every rank.
  EXPECT_TRUE(torch::equal(rank0.val_batch(1).inputs, rank1.val_batch(1).inputs));
}

TEST(SyntheticCorpus, CopiedTokensRepeatTheSpanBeforeTheMarker) {
  const auto data = corpus(16, 64);
  const int64_t c = data.spec().copy_length;
  const Batch b = data.train_batch(0);
  // Target j is token j+1 of the window; a copied one equals the token c+1 earlier.
  const auto window = torch::cat({b.inputs.slice(1, 0, 1), b.targets}, 1);
  int64_t copies = 0, markers = 0;
  for (int64_t r = 0; r < window.size(0); ++r)
    for (int64_t j = 0; j < b.targets.size(1); ++j) {
      const int64_t pos = j + 1;
      const int64_t token = window[r][pos].item<int64_t>();
      if (b.copy_mask[r][j].item<bool>()) {
        ++copies;
        ASSERT_GE(pos, c + 1);
        EXPECT_EQ(token, window[r][pos - c - 1].item<int64_t>());
      } else if (token == data.marker_token()) {
        ++markers;
      } else if (window[r][pos - 1].item<int64_t>() != data.marker_token()) {
        EXPECT_GT(data.transition_probability(window[r][pos - 1].item<int64_t>(), token), 0.0);
      }
    }
  EXPECT_GT(markers, 0);
  EXPECT_GE(copies, markers * c - c * 16);  // spans cut off at the window end excepted
}

// The ideal predictor, run token by token on sampled windows, must average the analytic
// floor: it knows the transition matrix, the copy rule and the copy probability.
TEST(SyntheticCorpus, LossFloorMatchesTheIdealPredictorOnSampledData) {
  const auto data = corpus(64, 64);
  const auto& spec = data.spec();
  const double p = spec.copy_probability;
  double total = 0, copied = 0;
  int64_t count = 0;
  for (int64_t index = 0; index < 40; ++index) {
    const Batch b = data.train_batch(index);
    const auto window = torch::cat({b.inputs.slice(1, 0, 1), b.targets}, 1).contiguous();
    const auto* w = window.data_ptr<int64_t>();
    const int64_t width = window.size(1);
    for (int64_t r = 0; r < window.size(0); ++r) {
      const int64_t* row = w + r * width;
      int64_t run = 1, copy_left = 0;
      for (int64_t pos = 1; pos < width; ++pos, ++count) {
        if (copy_left > 0) {  // known exactly: zero loss
          ++copied;
          if (--copy_left == 0) run = 0;
          continue;
        }
        const bool eligible = run >= spec.copy_length;
        if (row[pos] == data.marker_token()) {
          total -= std::log(p);
          copy_left = spec.copy_length;
          continue;
        }
        total -= std::log(data.transition_probability(row[pos - 1], row[pos])) + (eligible ? std::log1p(-p) : 0.0);
        ++run;
      }
    }
  }
  const double empirical = total / double(count);
  EXPECT_NEAR(empirical, *data.loss_floor(), 0.02 * *data.loss_floor());
  EXPECT_NEAR(copied / double(count), data.copy_fraction(), 0.01);
  // The floor sits well below the Markov entropy rate because copies are free.
  EXPECT_LT(*data.loss_floor(), data.entropy_rate());
}

TEST(SyntheticCorpus, BadSpecsAreConfigErrors) {
  EXPECT_THROW(SyntheticCorpus(SyntheticSpec{.vocab_size = 4}, 1, 2, 8, 0, 1, cpu), ConfigError);
  EXPECT_THROW(SyntheticCorpus(SyntheticSpec{.copy_probability = 0}, 1, 2, 8, 0, 1, cpu), ConfigError);
}

// --- files ---

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rcl_test_data_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }
  static std::string refusal(const std::string& path, int64_t seq_len = 8) {
    return testing::config_error_of([&] { TokenFile(path, 0.1, 1, 2, seq_len, 0, 1, cpu); });
  }
  fs::path dir_;
};

TEST_F(TokenFileTest, JsonlDocumentsBecomeBosBytesEos) {
  const auto path = write("docs.jsonl", "{\"text\": \"ab\"}\n\n{\"text\": \"cd\", \"id\": 3}\n");
  // 8 tokens: BOS a b EOS BOS c d EOS; windows of 4 overlapping by one: 2 windows.
  TokenFile data(path, 0.0, 1, 1, 3, 0, 1, cpu);
  EXPECT_EQ(data.vocab_size(), 259);
  EXPECT_EQ(data.token_count(), 8);
  EXPECT_FALSE(data.has_validation());
  std::set<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < 2; ++i) {
    const auto b = data.train_batch(i);
    auto row = rows_of(torch::cat({b.inputs, b.targets.slice(1, -1)}, 1))[0];
    seen.insert(row);
  }
  const std::set<std::vector<int64_t>> expected{{256, 'a', 'b', 257}, {257, 256, 'c', 'd'}};
  EXPECT_EQ(seen, expected);  // one epoch visits each window once
}

TEST_F(TokenFileTest, PlainTextSplitsIntoDisjointTrainAndValidationWindows) {
  std::mt19937 gen(5);  // the mt19937 sequence is fixed by the standard
  std::string text;
  for (int i = 0; i < 400; ++i) text += char('a' + gen() % 26);
  const auto path = write("book.txt", text);
  TokenFile data(path, 0.25, 3, 4, 8, 0, 1, cpu);
  ASSERT_TRUE(data.has_validation());
  std::set<std::vector<int64_t>> train, val;
  for (int64_t i = 0; i < 10; ++i)
    for (auto& row : rows_of(data.train_batch(i).inputs)) train.insert(row);
  for (int64_t i = 0; i < 10; ++i)
    for (auto& row : rows_of(data.val_batch(i).inputs)) val.insert(row);
  EXPECT_EQ(val.size(), 13u);  // round(0.25 * 50 windows)
  EXPECT_EQ(train.size(), 37u);
  for (const auto& row : val) EXPECT_EQ(train.count(row), 0u);
  // Deterministic from the seed; another seed orders differently.
  TokenFile again(path, 0.25, 3, 4, 8, 0, 1, cpu), reseeded(path, 0.25, 4, 4, 8, 0, 1, cpu);
  EXPECT_TRUE(torch::equal(data.train_batch(2).inputs, again.train_batch(2).inputs));
  EXPECT_FALSE(torch::equal(data.train_batch(2).inputs, reseeded.train_batch(2).inputs));
}

TEST_F(TokenFileTest, BadFilesNameThePathAndTheProblem) {
  const auto missing = (dir_ / "nope.txt").string();
  auto msg = refusal(missing);
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;

  const auto broken = write("broken.jsonl", "{\"text\": \"ok\"}\n{not json\n");
  msg = refusal(broken);
  EXPECT_NE(msg.find(broken), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;

  msg = refusal(write("notext.jsonl", "{\"body\": \"x\"}\n"));
  EXPECT_NE(msg.find("\"text\""), std::string::npos) << msg;

  msg = refusal(write("empty.txt", ""));
  EXPECT_NE(msg.find("no text"), std::string::npos) << msg;

  msg = refusal(write("short.txt", "tiny"), 64);
  EXPECT_NE(msg.find("window"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, FactoryPicksTheSourceAndChecksVocab) {
  TrainingConfig cfg;
  cfg.batch_size = 2;
  cfg.seq_len = 8;
  EXPECT_EQ(make_data_source(cfg, 0, 1, cpu)->vocab_size(), SyntheticSpec{}.vocab_size);
  cfg.vocab_size = 100;
  EXPECT_EQ(make_data_source(cfg, 0, 1, cpu)->vocab_size(), 100);
  cfg.data_path = write("t.txt", std::string(200, 'x'));
  EXPECT_THROW(make_data_source(cfg, 0, 1, cpu), ConfigError);  // 100 < 259 byte tokens
  cfg.vocab_size = 0;
  EXPECT_EQ(make_data_source(cfg, 0, 1, cpu)->vocab_size(), 259);
}

TEST_F(TokenFileTest, FactoryRefusesDataOpenedForAnotherCut) {
  TrainingConfig cfg;
  cfg.batch_size = 2;
  cfg.seq_len = 8;
  cfg.data_path = write("t.txt", std::string(200, 'x'));
  const auto opened = open_data(cfg);
  EXPECT_EQ(make_data_source(cfg, 0, 1, cpu, opened)->seq_len(), 8);
  const auto refusal = [&](const TrainingConfig& other) -> std::string {
    try {
      make_data_source(other, 0, 1, cpu, opened);
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "";
  };
  TrainingConfig other = cfg;
  other.seq_len = 16;
  EXPECT_NE(refusal(other).find("seq_len"), std::string::npos);
  other = cfg;
  other.val_fraction = cfg.val_fraction + 0.1;
  EXPECT_NE(refusal(other).find("val_fraction"), std::string::npos);
  other = cfg;
  other.seed = cfg.seed + 1;
  EXPECT_NE(refusal(other).find("seed"), std::string::npos);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
