#include "rocm_conformance_llm/data.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/workload/indexed_dataset.hpp"

namespace rcl {
namespace {

// SplitMix64: a tiny generator with a fully specified output, so the corpus and the data order
// are the same on every platform and standard library (std:: distributions are not).
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t stream_seed(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++); }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t below(int64_t n) { return int64_t(next() % uint64_t(n)); }

 private:
  uint64_t state_;
};

// Independent random streams of one seed.
enum Stream : uint64_t { transitions = 1, train_samples, val_samples, window_split, epoch_order };

int64_t sample_cumulative(const double* cum, int64_t n, double u) {
  const auto* it = std::upper_bound(cum, cum + n, u);
  return std::min<int64_t>(it - cum, n - 1);  // guards u against a last entry of 1 - eps
}

template <typename T>
void shuffle(std::vector<T>& items, SplitMix& rng) {
  for (int64_t i = int64_t(items.size()) - 1; i > 0; --i) std::swap(items[i], items[rng.below(i + 1)]);
}

}  // namespace

// --- DataSource ---

DataSource::DataSource(int64_t batch_size, int64_t seq_len, int rank, int world_size, torch::Device device)
    : batch_size_(batch_size), seq_len_(seq_len), rank_(rank), world_size_(world_size), device_(device) {}

Batch DataSource::train_batch(int64_t index) const {
  return assemble(Split::train, index * batch_size_ * world_size_ + rank_, world_size_);
}

Batch DataSource::val_batch(int64_t index) const { return assemble(Split::validation, index * batch_size_, 1); }

Batch DataSource::assemble(Split split, int64_t first_sample, int64_t sample_stride) const {
  // Built in pinned host memory when the device is a GPU, so the copy below is an
  // asynchronous DMA that overlaps the previous step's kernels.
  const auto host = torch::TensorOptions().pinned_memory(device_.type() != torch::kCPU);
  const int64_t width = seq_len_ + 1;
  auto windows = torch::empty({batch_size_, width}, host.dtype(torch::kLong));
  torch::Tensor copied;
  if (marks_copies()) copied = torch::empty({batch_size_, width}, host.dtype(torch::kBool));
  for (int64_t row = 0; row < batch_size_; ++row)
    fill_window(split, first_sample + row * sample_stride, windows.data_ptr<int64_t>() + row * width,
                copied.defined() ? copied.data_ptr<bool>() + row * width : nullptr);

  windows = windows.to(device_, /*non_blocking=*/true);
  Batch batch{windows.slice(1, 0, seq_len_), windows.slice(1, 1), {}};
  if (copied.defined()) batch.copy_mask = copied.to(device_, /*non_blocking=*/true).slice(1, 1);
  return batch;
}

// --- SyntheticCorpus ---

SyntheticCorpus::SyntheticCorpus(SyntheticSpec spec, uint64_t seed, int64_t batch_size, int64_t seq_len, int rank,
                                 int world_size, torch::Device device)
    : DataSource(batch_size, seq_len, rank, world_size, device),
      spec_(spec),
      seed_(seed),
      states_(spec.vocab_size - 1) {
  if (spec.vocab_size < 8)
    throw ConfigError(fmt::format("invalid vocab_size={} for the synthetic corpus: must be >= 8", spec.vocab_size));
  if (spec.successors < 1 || spec.successors > states_)
    throw ConfigError(fmt::format("synthetic corpus: successors={} must be in [1, {}]", spec.successors, states_));
  if (spec.copy_length < 1) throw ConfigError("synthetic corpus: copy_length must be >= 1");
  if (!(spec.copy_probability > 0 && spec.copy_probability < 1))
    throw ConfigError(fmt::format("synthetic corpus: copy_probability={} must be in (0, 1)", spec.copy_probability));

  // Sparse transition matrix: each state moves to (state + 1) mod n, which keeps the chain
  // irreducible, and to successors - 1 other random states; row weights are Dirichlet(1).
  const int64_t k = spec.successors;
  SplitMix rng(stream_seed(seed, Stream::transitions, 0));
  next_state_.resize(states_ * k);
  next_cumprob_.resize(states_ * k);
  std::vector<double> row_entropy(states_);
  for (int64_t s = 0; s < states_; ++s) {
    int64_t* next = &next_state_[s * k];
    next[0] = (s + 1) % states_;
    for (int64_t filled = 1; filled < k;) {
      const int64_t candidate = rng.below(states_);
      if (std::find(next, next + filled, candidate) == next + filled) next[filled++] = candidate;
    }
    std::vector<double> weight(k);
    double total = 0;
    for (auto& w : weight) total += (w = -std::log(1.0 - rng.uniform()));
    double cum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double p = weight[j] / total;
      row_entropy[s] -= p * std::log(p);
      next_cumprob_[s * k + j] = (cum += p);
    }
  }

  // Stationary distribution by power iteration on the lazy chain (I + P) / 2: same fixed
  // point, and it converges even if the chain is periodic.
  std::vector<double> pi(states_, 1.0 / double(states_)), next_pi(states_);
  for (int iter = 0; iter < 1000000; ++iter) {
    std::fill(next_pi.begin(), next_pi.end(), 0.0);
    for (int64_t s = 0; s < states_; ++s) {
      next_pi[s] += 0.5 * pi[s];
      double prev = 0;
      for (int64_t j = 0; j < k; ++j) {
        next_pi[next_state_[s * k + j]] += 0.5 * pi[s] * (next_cumprob_[s * k + j] - prev);
        prev = next_cumprob_[s * k + j];
      }
    }
    double change = 0;
    for (int64_t s = 0; s < states_; ++s) change += std::abs(next_pi[s] - pi[s]);
    pi.swap(next_pi);
    if (change < 1e-14) break;
  }
  stationary_cum_.resize(states_);
  double cum = 0;
  for (int64_t s = 0; s < states_; ++s) {
    entropy_rate_ += pi[s] * row_entropy[s];
    stationary_cum_[s] = (cum += pi[s]);
  }

  // Exact expected loss of the ideal predictor over the seq_len targets of a window. Every
  // Markov token is marginally stationary (copy decisions ignore token values), so a Markov
  // transition costs entropy_rate on average. Phases: run[r] = r Markov tokens since the last
  // copy (r = c: eligible for a copy), copy[j] = marker plus j copied tokens so far.
  // Eligible step: marker with p (-log p) or a transition with 1 - p (-log(1-p) + H).
  // Copied tokens cost nothing: the ideal predictor knows them.
  const int64_t c = spec.copy_length;
  const double p = spec.copy_probability;
  const double choice_entropy = -p * std::log(p) - (1 - p) * std::log1p(-p);
  std::vector<double> run(c + 1, 0.0), copy(c, 0.0);
  run[std::min<int64_t>(1, c)] = 1.0;  // after the window's first token
  double expected_loss = 0, expected_copied = 0;
  for (int64_t t = 0; t < seq_len; ++t) {
    std::vector<double> next_run(c + 1, 0.0), next_copy(c, 0.0);
    for (int64_t r = 0; r < c; ++r) {
      expected_loss += run[r] * entropy_rate_;
      next_run[r + 1] += run[r];
    }
    expected_loss += run[c] * (choice_entropy + (1 - p) * entropy_rate_);
    next_copy[0] += p * run[c];
    next_run[c] += (1 - p) * run[c];
    for (int64_t j = 0; j < c; ++j) {
      expected_copied += copy[j];
      (j + 1 == c ? next_run[0] : next_copy[j + 1]) += copy[j];
    }
    run.swap(next_run);
    copy.swap(next_copy);
  }
  loss_floor_ = expected_loss / double(seq_len);
  copy_fraction_ = expected_copied / double(seq_len);
}

double SyntheticCorpus::transition_probability(int64_t from, int64_t to) const {
  const int64_t k = spec_.successors;
  double prev = 0;
  for (int64_t j = 0; j < k; ++j) {
    const double cum = next_cumprob_[from * k + j];
    if (next_state_[from * k + j] == to) return cum - prev;
    prev = cum;
  }
  return 0.0;
}

nlohmann::json SyntheticCorpus::record() const {
  return {{"kind", "synthetic"}, {"vocab_size", vocab_size()}, {"loss_floor", loss_floor_}};
}

std::string SyntheticCorpus::describe() const {
  return fmt::format(
      "synthetic corpus: {} Markov states x {} successors, copy spans of {} (p={}); entropy rate {:.4f} "
      "nats, {:.1f}% copied targets, loss floor {:.4f} nats/token at seq_len {}",
      states_, spec_.successors, spec_.copy_length, spec_.copy_probability, entropy_rate_, 100 * copy_fraction_,
      loss_floor_, seq_len());
}

void SyntheticCorpus::fill_window(Split split, int64_t sample, int64_t* tokens, bool* copied) const {
  SplitMix rng(stream_seed(seed_, split == Split::train ? Stream::train_samples : Stream::val_samples, sample));
  const int64_t k = spec_.successors;
  const int64_t c = spec_.copy_length;
  const int64_t width = seq_len() + 1;
  int64_t current = sample_cumulative(stationary_cum_.data(), states_, rng.uniform());
  int64_t run = 1, copy_left = 0, copy_from = 0;
  tokens[0] = current;
  if (copied) copied[0] = false;
  for (int64_t pos = 1; pos < width; ++pos) {
    bool is_copy = false;
    if (copy_left > 0) {
      tokens[pos] = tokens[copy_from++];  // ends on the token before the marker == current
      is_copy = true;
      if (--copy_left == 0) run = 0;
    } else if (run >= c && rng.uniform() < spec_.copy_probability) {
      tokens[pos] = marker_token();
      copy_from = pos - c;
      copy_left = c;
    } else {
      current = next_state_[current * k + sample_cumulative(&next_cumprob_[current * k], k, rng.uniform())];
      tokens[pos] = current;
      ++run;
    }
    if (copied) copied[pos] = is_copy;
  }
}

// --- the stores ---

namespace {

std::vector<uint16_t> tokenize_file(const std::string& path) {
  auto fail = [&](const std::string& what) { return ConfigError("invalid data_path '" + path + "': " + what); };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw fail("not a readable regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail("cannot be opened");
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  std::vector<uint16_t> tokens;
  auto add_document = [&](const std::string& text) {
    tokens.push_back(byte_tokens::bos);
    for (unsigned char byte : text) tokens.push_back(byte);
    tokens.push_back(byte_tokens::eos);
  };
  if (std::filesystem::path(path).extension() == ".jsonl") {
    std::istringstream lines(content);
    std::string line;
    for (int64_t number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json record;
      try {
        record = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw fail(fmt::format("line {} is not valid JSON ({})", number, e.what()));
      }
      if (!record.is_object() || !record.contains("text") || !record["text"].is_string())
        throw fail(fmt::format("line {} has no string field \"text\"", number));
      add_document(record["text"].get<std::string>());
    }
  } else {
    add_document(content);
  }
  if (tokens.size() <= 2 * size_t(std::count(tokens.begin(), tokens.end(), byte_tokens::bos)))
    throw fail("contains no text");
  return tokens;
}

class ByteText final : public TokenStore {
 public:
  explicit ByteText(const std::string& path) : path_(path), tokens_(tokenize_file(path)) {}
  int64_t size() const override { return int64_t(tokens_.size()); }
  void read(int64_t start, int64_t count, int64_t* out) const override {
    std::copy_n(tokens_.begin() + start, count, out);
  }
  int64_t vocab_size() const override { return byte_tokens::vocab_size; }
  std::string tokenizer() const override { return "bytes"; }
  std::string describe() const override { return fmt::format("byte-level text '{}'", path_); }
  nlohmann::json record() const override { return {{"kind", "byte_text"}, {"path", path_}}; }

 private:
  std::string path_;
  std::vector<uint16_t> tokens_;  // 2 bytes per token: the whole file stays in memory
};

class IndexedShards final : public TokenStore {
 public:
  IndexedShards(const std::string& path, int64_t configured_vocab)
      : data_(path), vocab_(data_.vocab_size(configured_vocab)) {}
  int64_t size() const override { return data_.tokens(); }
  void read(int64_t start, int64_t count, int64_t* out) const override { data_.read(start, count, out); }
  int64_t vocab_size() const override { return vocab_; }
  std::string tokenizer() const override {
    const auto& sidecar = data_.sidecar();
    return sidecar ? sidecar->tokenizer_sha256 : "";
  }
  void check_ids() const override { data_.check_ids_below(vocab_); }
  std::string describe() const override {
    const auto& sidecar = data_.sidecar();
    return fmt::format("indexed dataset '{}' ({}, {} documents, tokenizer {})", data_.prefix(), data_.dtype_name(),
                       data_.documents(), sidecar ? "sha256 " + sidecar->tokenizer_sha256.substr(0, 12) : "unnamed");
  }
  nlohmann::json record() const override {
    const auto& sidecar = data_.sidecar();
    return {{"kind", "indexed_dataset"},
            {"path", data_.prefix()},
            {"dtype", data_.dtype_name()},
            {"documents", data_.documents()},
            {"tokenizer_sha256", sidecar ? nlohmann::json(sidecar->tokenizer_sha256) : nlohmann::json()},
            {"special_ids", sidecar ? sidecar->special_ids : nlohmann::json()}};
  }

 private:
  IndexedDataset data_;
  int64_t vocab_;
};

std::optional<double> parse_weight(const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {}
  return std::nullopt;
}

}  // namespace

std::unique_ptr<TokenStore> open_token_store(const std::string& path, int64_t configured_vocab) {
  if (is_indexed_dataset(path)) return std::make_unique<IndexedShards>(path, configured_vocab);
  if (configured_vocab > 0 && configured_vocab < byte_tokens::vocab_size)
    throw ConfigError(
        fmt::format("invalid vocab_size={}: the byte-level tokenizer needs >= {} (0 = take it from the data)",
                    configured_vocab, byte_tokens::vocab_size));
  return std::make_unique<ByteText>(path);
}

// --- blends ---

std::vector<DataPart> data_parts(const std::string& data_path) {
  std::vector<std::string> words;
  std::istringstream in(data_path);
  for (std::string word; in >> word;) words.push_back(word);
  // A blend starts with a weight; any other string is one path (spaces and all).
  if (words.size() < 2 || !parse_weight(words[0])) return {{1, data_path}};
  auto fail = [&](const std::string& what) {
    return ConfigError(
        fmt::format("invalid data_path '{}': {}; a blend is WEIGHT PATH pairs, e.g. \"0.7 data/web 0.3 data/code\"",
                    data_path, what));
  };
  if (words.size() % 2 != 0) throw fail(fmt::format("{} words do not pair up", words.size()));
  if (int64_t(words.size()) / 2 > BlendCycle::kSlots)
    throw fail(fmt::format("{} parts (at most {})", words.size() / 2, BlendCycle::kSlots));
  std::vector<DataPart> parts;
  for (size_t i = 0; i < words.size(); i += 2) {
    const auto weight = parse_weight(words[i]);
    if (!weight || !std::isfinite(*weight) || *weight <= 0)
      throw fail(fmt::format("weight '{}' is not a positive number", words[i]));
    parts.push_back({*weight, words[i + 1]});
  }
  return parts;
}

BlendCycle::BlendCycle(const std::vector<double>& weights) {
  const int64_t parts = int64_t(weights.size());
  const int64_t cycle = parts == 1 ? 1 : kSlots;
  // Largest remainder, each part at least one slot (taken back from the largest where that overshoots).
  double total = 0;
  for (double w : weights) total += w;
  std::vector<double> remainder(parts);
  slots_.assign(parts, 0);
  int64_t dealt = 0;
  for (int64_t p = 0; p < parts; ++p) {
    const double exact = weights[p] / total * double(cycle);
    slots_[p] = std::max<int64_t>(1, int64_t(std::floor(exact)));
    remainder[p] = exact - double(slots_[p]);
    dealt += slots_[p];
  }
  for (; dealt < cycle; ++dealt) {  // max_element: the first of equal remainders, the lowest part
    const auto p = std::max_element(remainder.begin(), remainder.end()) - remainder.begin();
    ++slots_[p];
    remainder[p] -= 1;
  }
  for (; dealt > cycle; --dealt) --slots_[std::max_element(slots_.begin(), slots_.end()) - slots_.begin()];
  // Deal the slots: each to the part furthest behind its share (the lowest part on a tie).
  std::vector<int64_t> taken(parts, 0);
  for (int64_t j = 0; j < cycle; ++j) {
    int best = 0;
    double best_deficit = -1e300;
    for (int64_t p = 0; p < parts; ++p) {
      const double deficit = double(slots_[p]) * double(j + 1) / double(cycle) - double(taken[p]);
      if (deficit > best_deficit) best = int(p), best_deficit = deficit;
    }
    slot_part_.push_back(best);
    slot_index_.push_back(taken[best]++);
  }
}

BlendCycle::Pick BlendCycle::pick(int64_t sample) const {
  const int64_t cycle = int64_t(slot_part_.size());
  const int64_t slot = sample % cycle;
  const int part = slot_part_[slot];
  return {part, (sample / cycle) * slots_[part] + slot_index_[slot]};
}

namespace {
std::string tokenizer_of(const TokenStore& store) {
  const std::string id = store.tokenizer();
  if (id == "bytes") return "the byte tokenizer";
  return id.empty() ? "an unnamed tokenizer" : "tokenizer sha256 " + id;
}

// Part `index`'s windows, split train/validation by the shuffle of (window_split, index).
void cut_windows(OpenedPart& part, const WindowCut& cut, uint64_t index) {
  // Windows of seq_len + 1 tokens overlapping by one, so every token is a target once.
  const int64_t tokens = part.store->size();
  const int64_t windows = (tokens - 1) / cut.seq_len;
  const int64_t val_count =
      cut.val_fraction > 0 ? std::max<int64_t>(1, std::llround(cut.val_fraction * double(windows))) : 0;
  if (windows - val_count < 1)
    throw ConfigError(fmt::format(
        "invalid data_path '{}': {} tokens make {} window(s) of seq_len+1={}, need at least {} (train + validation)",
        part.given.path, tokens, windows, cut.seq_len + 1, val_count + 1));
  std::vector<int64_t> starts(windows);
  for (int64_t w = 0; w < windows; ++w) starts[w] = w * cut.seq_len;
  SplitMix rng(stream_seed(cut.seed, Stream::window_split, index));
  shuffle(starts, rng);
  part.val_windows.assign(starts.begin(), starts.begin() + val_count);
  part.train_windows.assign(starts.begin() + val_count, starts.end());
}
}  // namespace

std::shared_ptr<const OpenedData> open_data(const std::string& data_path, int64_t configured_vocab, WindowCut cut) {
  auto data = std::make_shared<OpenedData>(OpenedData{cut, {}});
  for (auto& given : data_parts(data_path)) {
    auto store = open_token_store(given.path, configured_vocab);
    OpenedPart part{std::move(given), std::move(store), {}, {}};
    if (!data->parts.empty()) {
      const OpenedPart& first = data->parts.front();
      const TokenStore &ours = *first.store, &theirs = *part.store;
      if (theirs.tokenizer() != ours.tokenizer() || theirs.vocab_size() != ours.vocab_size())
        throw ConfigError(fmt::format(
            "invalid data_path '{}': '{}' holds ids of {} (vocabulary {}), '{}' of {} (vocabulary {}); a blend's "
            "parts share one tokenizer",
            data_path, first.given.path, tokenizer_of(ours), ours.vocab_size(), part.given.path, tokenizer_of(theirs),
            theirs.vocab_size()));
    }
    cut_windows(part, cut, uint64_t(data->parts.size()));
    data->parts.push_back(std::move(part));
  }
  return data;
}

namespace {
WindowCut window_cut_of(const TrainingConfig& cfg) { return {cfg.seq_len, cfg.val_fraction, cfg.seed}; }

// Data opened for another cut would train on other windows than cfg's: a caller's bug.
void require_cut(const WindowCut& opened, const TrainingConfig& cfg) {
  const WindowCut wanted = window_cut_of(cfg);
  const auto require_same = [](const char* field, auto was, auto is) {
    if (was != is)
      throw std::logic_error(
          fmt::format("make_data_source: the opened data was cut with {} {}, the config has {}", field, was, is));
  };
  require_same("seq_len", opened.seq_len, wanted.seq_len);
  require_same("val_fraction", opened.val_fraction, wanted.val_fraction);
  require_same("seed", opened.seed, wanted.seed);
}
}  // namespace

std::shared_ptr<const OpenedData> open_data(const TrainingConfig& cfg) {
  return open_data(cfg.data_path, cfg.vocab_size, window_cut_of(cfg));
}

// --- TokenFile ---

namespace {
std::vector<double> weights_of(const OpenedData& data) {
  std::vector<double> weights;
  for (const auto& part : data.parts) weights.push_back(part.given.weight);
  return weights;
}
}  // namespace

TokenFile::TokenFile(std::shared_ptr<const OpenedData> data, int64_t batch_size, int rank, int world_size,
                     torch::Device device)
    : DataSource(batch_size, data->cut.seq_len, rank, world_size, device),
      data_(std::move(data)),
      cycle_(weights_of(*data_)),
      epoch_orders_(data_->parts.size()) {}

TokenFile::TokenFile(const std::string& data_path, double val_fraction, uint64_t seed, int64_t batch_size,
                     int64_t seq_len, int rank, int world_size, torch::Device device, int64_t configured_vocab)
    : TokenFile(open_data(data_path, configured_vocab, {seq_len, val_fraction, seed}), batch_size, rank, world_size,
                device) {}

int64_t TokenFile::token_count() const {
  int64_t tokens = 0;
  for (const auto& part : data_->parts) tokens += part.store->size();
  return tokens;
}

nlohmann::json TokenFile::part_record(const OpenedPart& part) const {
  nlohmann::json doc = part.store->record();
  doc["vocab_size"] = vocab_size();
  doc["tokens"] = part.store->size();
  doc["train_windows"] = part.train_windows.size();
  doc["validation_windows"] = part.val_windows.size();
  return doc;
}

nlohmann::json TokenFile::record() const {
  const auto& parts = data_->parts;
  if (parts.size() == 1) return part_record(parts.front());
  nlohmann::json records = nlohmann::json::array();
  int64_t train = 0, validation = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    nlohmann::json doc = part_record(parts[p]);
    doc["weight"] = parts[p].given.weight;
    doc["share"] = cycle_.share(int(p));
    records.push_back(std::move(doc));
    train += int64_t(parts[p].train_windows.size());
    validation += int64_t(parts[p].val_windows.size());
  }
  return {{"kind", "blend"},        {"vocab_size", vocab_size()},       {"tokens", token_count()},
          {"train_windows", train}, {"validation_windows", validation}, {"parts", std::move(records)}};
}

std::string TokenFile::describe() const {
  const auto& parts = data_->parts;
  std::string text;
  for (size_t p = 0; p < parts.size(); ++p) {
    const OpenedPart& part = parts[p];
    if (parts.size() > 1) text += fmt::format("{}{:.1f}% ", p ? "; " : "blend of ", 100 * cycle_.share(int(p)));
    text += fmt::format("{}: {} tokens, {} train / {} validation windows of {} tokens", part.store->describe(),
                        part.store->size(), part.train_windows.size(), part.val_windows.size(), seq_len() + 1);
  }
  return text;
}

void TokenFile::fill_window(Split split, int64_t sample, int64_t* tokens, bool*) const {
  const auto [index, part_sample] = cycle_.pick(sample);
  const OpenedPart& part = data_->parts[index];
  int64_t start;
  if (split == Split::validation) {
    start = part.val_windows[part_sample % int64_t(part.val_windows.size())];
  } else {
    const int64_t count = int64_t(part.train_windows.size());
    const int64_t epoch = part_sample / count;
    EpochOrder& order = epoch_orders_[index];
    if (epoch != order.epoch) {
      order.windows = part.train_windows;
      SplitMix rng(
          stream_seed(data_->cut.seed, Stream::epoch_order, uint64_t(epoch) * data_->parts.size() + uint64_t(index)));
      shuffle(order.windows, rng);
      order.epoch = epoch;
    }
    start = order.windows[part_sample % count];
  }
  part.store->read(start, seq_len() + 1, tokens);
}

std::unique_ptr<DataSource> make_data_source(const TrainingConfig& cfg, int rank, int world_size, torch::Device device,
                                             std::shared_ptr<const OpenedData> opened) {
  if (cfg.data_path.empty()) {
    SyntheticSpec spec;
    if (cfg.vocab_size > 0) spec.vocab_size = cfg.vocab_size;
    return std::make_unique<SyntheticCorpus>(spec, cfg.seed, cfg.batch_size, cfg.seq_len, rank, world_size, device);
  }
  if (opened) require_cut(opened->cut, cfg);
  return std::make_unique<TokenFile>(opened ? std::move(opened) : open_data(cfg), cfg.batch_size, rank, world_size,
                                     device);
}

int64_t resolved_vocab_size(const TrainingConfig& cfg) {
  if (cfg.vocab_size > 0) return cfg.vocab_size;
  if (cfg.data_path.empty()) return SyntheticSpec{}.vocab_size;
  const std::string first = data_parts(cfg.data_path).front().path;  // a blend's parts share one tokenizer
  return is_indexed_dataset(first) ? indexed_dataset_vocab_size(first, 0) : byte_tokens::vocab_size;
}

}  // namespace rcl
