// Training data: a seeded synthetic corpus whose ideal loss is known exactly (the default:
// no files needed, and a run can be judged against its floor), a plain-text / JSONL file
// through a byte-level tokenizer, or the user's own tokens in indexed datasets (several blended
// with weights). Every batch is a pure function of (seed, rank, world size, batch index), so
// ranks read disjoint shards and a replay re-reads the same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

struct Batch {
  torch::Tensor inputs;     // [B, T] int64, on the run's device
  torch::Tensor targets;    // [B, T] int64: inputs shifted by one token
  torch::Tensor copy_mask;  // [B, T] bool: the target repeats an earlier span (synthetic only)
};

enum class Split { train, validation };

class DataSource {
 public:
  DataSource(int64_t batch_size, int64_t seq_len, int rank, int world_size, torch::Device device);
  virtual ~DataSource() = default;

  virtual int64_t vocab_size() const = 0;
  virtual std::string describe() const = 0;
  // What report.json's "data" section says of it: {"kind", "vocab_size", ...}.
  virtual nlohmann::json record() const = 0;
  // Expected loss of the ideal predictor on seq_len windows (nats/token), when known.
  virtual std::optional<double> loss_floor() const { return std::nullopt; }
  virtual bool has_validation() const { return true; }

  // Micro-batch `index` of this rank's shard. Rows of rank r are the samples
  // (index * batch_size + row) * world_size + r: disjoint across ranks.
  Batch train_batch(int64_t index) const;
  // Validation batch `index`: the same on every rank, so every rank reports the same loss.
  Batch val_batch(int64_t index) const;

  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }

 protected:
  // Writes sample `sample` of `split` (seq_len + 1 tokens) into `tokens`; when `copied` is
  // non-null, also marks which of those tokens repeat an earlier span.
  virtual void fill_window(Split split, int64_t sample, int64_t* tokens, bool* copied) const = 0;
  virtual bool marks_copies() const { return false; }

 private:
  Batch assemble(Split split, int64_t first_sample, int64_t sample_stride) const;

  int64_t batch_size_;
  int64_t seq_len_;
  int rank_;
  int world_size_;
  torch::Device device_;
};

// Shape of the synthetic corpus. An order-1 Markov chain over vocab_size - 1 states, each with
// `successors` random next states, interrupted by copy segments: after at least copy_length
// Markov tokens, with probability copy_probability a marker token is emitted and followed by
// a verbatim repeat of the copy_length tokens before it. Only attention can predict those.
struct SyntheticSpec {
  int64_t vocab_size = 64;  // states + the copy marker
  int64_t successors = 4;
  int64_t copy_length = 8;
  double copy_probability = 0.1;
};

class SyntheticCorpus final : public DataSource {
 public:
  SyntheticCorpus(SyntheticSpec spec, uint64_t seed, int64_t batch_size, int64_t seq_len, int rank, int world_size,
                  torch::Device device);

  int64_t vocab_size() const override { return spec_.vocab_size; }
  std::string describe() const override;
  nlohmann::json record() const override;
  std::optional<double> loss_floor() const override { return loss_floor_; }

  // Entropy rate of the Markov chain (nats per Markov transition), exact from its
  // stationary distribution.
  double entropy_rate() const { return entropy_rate_; }
  // Expected fraction of targets that are copied tokens.
  double copy_fraction() const { return copy_fraction_; }
  double transition_probability(int64_t from, int64_t to) const;
  const SyntheticSpec& spec() const { return spec_; }
  int64_t marker_token() const { return spec_.vocab_size - 1; }

 protected:
  void fill_window(Split split, int64_t sample, int64_t* tokens, bool* copied) const override;
  bool marks_copies() const override { return true; }

 private:
  SyntheticSpec spec_;
  uint64_t seed_;
  int64_t states_;
  std::vector<int64_t> next_state_;   // [states * successors]
  std::vector<double> next_cumprob_;  // [states * successors], cumulative per row
  std::vector<double> stationary_cum_;
  double entropy_rate_ = 0;
  double loss_floor_ = 0;
  double copy_fraction_ = 0;
};

// Byte-level tokenizer: bytes 0..255, then the specials.
namespace byte_tokens {
inline constexpr int64_t bos = 256;
inline constexpr int64_t eos = 257;
inline constexpr int64_t pad = 258;
inline constexpr int64_t vocab_size = 259;
}  // namespace byte_tokens

// The tokens a file-backed source cuts into windows, documents back to back: a text or JSONL
// file through the byte-level tokenizer (held in memory), or an indexed dataset of token ids
// (memory-mapped, workload/indexed_dataset.hpp).
class TokenStore {
 public:
  virtual ~TokenStore() = default;
  virtual int64_t size() const = 0;
  virtual void read(int64_t start, int64_t count, int64_t* out) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Which tokenizer made the ids ("bytes", a tokenizer's sha256, "" when unnamed): the parts of
  // a blend must agree.
  virtual std::string tokenizer() const = 0;
  // Every id below vocab_size(): a ConfigError naming the first outside (one pass; bytes always are).
  virtual void check_ids() const {}
  virtual std::string describe() const = 0;
  virtual nlohmann::json record() const = 0;  // {"kind", "path", ...}
};
// `path` as a store: an indexed dataset where PREFIX.idx exists (its vocabulary
// `configured_vocab` when > 0, else its sidecar's), else a text or JSONL file.
std::unique_ptr<TokenStore> open_token_store(const std::string& path, int64_t configured_vocab);

// One dataset of `training.data_path`: "W1 PATH1 W2 PATH2 ..." blends several (Megatron-LM's
// --data-path form, weights first); anything else is one path of weight 1.
struct DataPart {
  double weight = 1;
  std::string path;
};
// A ConfigError for a blend whose weight is not a positive number or whose path has no weight.
std::vector<DataPart> data_parts(const std::string& data_path);

// Which part each sample of a blend reads (docs/data.md "Blending several datasets"): the weights
// rounded to slots of a cycle of 1000 samples (each part at least one) and dealt greedily through
// it, Megatron's BlendedDataset rule, so a part's samples are spread evenly; a pure function of the
// sample's number. One part is a cycle of one slot: sample s is its sample s.
class BlendCycle {
 public:
  static constexpr int64_t kSlots = 1000;
  explicit BlendCycle(const std::vector<double>& weights);
  struct Pick {
    int part;
    int64_t sample;  // that part's sample number
  };
  Pick pick(int64_t sample) const;
  // The part's share of the samples: its slots over the cycle's.
  double share(int part) const { return double(slots_[part]) / double(slot_part_.size()); }

 private:
  std::vector<int64_t> slots_;       // per part
  std::vector<int> slot_part_;       // per slot of the cycle: its part
  std::vector<int64_t> slot_index_;  // per slot: the earlier slots of that part in the cycle
};

// How each part's tokens are cut (docs/data.md "Windows", "Validation split"): windows of
// seq_len + 1 tokens overlapping by one, val_fraction of them held out by a shuffle of `seed`.
struct WindowCut {
  int64_t seq_len;
  double val_fraction;
  uint64_t seed;
};

// One part of the data, opened and cut into windows.
struct OpenedPart {
  DataPart given;
  std::unique_ptr<TokenStore> store;
  std::vector<int64_t> train_windows;  // window start offsets into the store's tokens
  std::vector<int64_t> val_windows;
};
// Every part of `training.data_path`, opened once: what the run opens and checks before writing
// anything, then hands to the TokenFile it trains on (read-only: one copy serves both).
struct OpenedData {
  WindowCut cut;
  std::vector<OpenedPart> parts;
};
// ConfigErrors naming the part: a file that cannot be read, parts of different tokenizers or
// vocabularies, a part too short for one training window (and one validation window when
// val_fraction > 0).
std::shared_ptr<const OpenedData> open_data(const std::string& data_path, int64_t configured_vocab, WindowCut cut);
// cfg.data_path (non-empty) cut by cfg.seq_len, cfg.val_fraction and cfg.seed.
std::shared_ptr<const OpenedData> open_data(const TrainingConfig& cfg);

// The windows of opened data, one part or a blend of several (docs/data.md: "Text and JSONL
// files", "Indexed datasets", "Blending several datasets"): a plain-text file (one document),
// JSONL (one document per line, in the "text" field) tokenized as BOS bytes EOS per document, or
// an indexed dataset's ids as they are. Each part's training windows are reshuffled every epoch
// of that part.
class TokenFile final : public DataSource {
 public:
  TokenFile(std::shared_ptr<const OpenedData> data, int64_t batch_size, int rank, int world_size, torch::Device device);
  // Opens `data_path` itself.
  TokenFile(const std::string& data_path, double val_fraction, uint64_t seed, int64_t batch_size, int64_t seq_len,
            int rank, int world_size, torch::Device device, int64_t configured_vocab = 0);

  int64_t vocab_size() const override { return data_->parts.front().store->vocab_size(); }
  std::string describe() const override;
  nlohmann::json record() const override;
  bool has_validation() const override { return !data_->parts.front().val_windows.empty(); }
  int64_t token_count() const;

 protected:
  void fill_window(Split split, int64_t sample, int64_t* tokens, bool* copied) const override;

 private:
  struct EpochOrder {  // one part's training windows in the order of one epoch, computed on demand
    int64_t epoch = -1;
    std::vector<int64_t> windows;
  };
  nlohmann::json part_record(const OpenedPart& part) const;

  std::shared_ptr<const OpenedData> data_;
  BlendCycle cycle_;
  mutable std::vector<EpochOrder> epoch_orders_;  // per part
};

// The source cfg asks for: the synthetic corpus when cfg.data_path is empty (cfg.vocab_size,
// when set, sizes it), else the file or indexed dataset: `opened` where the run opened it
// (open_data(cfg)), else opened here. Bad files and a vocab_size too small for the data are
// ConfigErrors; `opened` cut for another seq_len, val_fraction or seed is a std::logic_error.
std::unique_ptr<DataSource> make_data_source(const TrainingConfig& cfg, int rank, int world_size, torch::Device device,
                                             std::shared_ptr<const OpenedData> opened = nullptr);
// The vocabulary the model of `cfg` will have, without reading the data: cfg.vocab_size when
// set, else the synthetic corpus's, the byte tokenizer's or an indexed dataset's sidecar's (a
// blend's first part's: what the trainer resolves it to).
int64_t resolved_vocab_size(const TrainingConfig& cfg);

}  // namespace rcl
