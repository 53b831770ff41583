// What a loop-side check may do to the training loop, and nothing more: read the run, re-run a
// forward, rewind to a snapshot and replay steps unpublished, save and reload a private
// checkpoint, name the phase it is in. The Trainer implements it; the checks see only this.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/loop/update_guard.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"
#include "rocm_conformance_llm/workload/hf_names.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

struct RunContext {
  TrainingConfig cfg;
  DiagnosticsConfig diag;
  torch::Device device{torch::kCPU};
  std::filesystem::path output_dir;
  // What the run's setup read of the data, so that nothing is read twice: the parts of
  // cfg.data_path opened and cut (open_data(cfg)), and what a checkpoint's export carries of their
  // tokenizer (read_hf_tokenizer(cfg)). Null where a context is made without setup (tests,
  // tools): the trainer reads them itself.
  std::shared_ptr<const OpenedData> data;
  std::shared_ptr<const HfTokenizer> hf_tokenizer;
};

class LoopAccess {
 public:
  // Everything a step reads or changes: what a checkpoint holds, plus the RNG, the data cursor
  // and the update guard.
  struct Snapshot {
    torch::Tensor params;        // FlatAdamW's flat parameter buffer (FSDP: this rank's shards)
    FlatAdamW::State optimizer;  // this rank's shard of the moments (all of them unsharded)
    ShardOf optimizer_shard;     // which shard that is (ZeRO, FSDP: one per rank)
    std::optional<DynamicLossScaler> scaler;
    RngSnapshot rng;
    int64_t step = 0;
    int64_t micro_batches = 0;
    UpdateGuard::State guard;
  };
  // What the host reads of a step.
  struct StepValues {
    double loss = 0, grad_norm = 0;
  };
  // A private checkpoint: its files, and the update guard, which no checkpoint file holds (a
  // resumed run starts clear; a reload inside the run puts it back).
  struct PrivateCheckpoint {
    std::filesystem::path dir;
    UpdateGuard::State guard;
  };

  virtual ~LoopAccess() = default;

  virtual const RunContext& ctx() const = 0;  // cfg.vocab_size resolved
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Every rank calls it at the same point (one all-reduce with several ranks).
  virtual double mean_across_ranks(double value) = 0;

  virtual GPT& model() = 0;
  // Micro-batch `index` of this rank's training data (the data cursor counts micro-batches).
  virtual Batch train_batch(int64_t index) const = 0;
  // Micro-batch forward and loss, through the hooks (the caller sets autocast, usually to
  // autocast_state()); `block_outputs` as in GPTImpl::forward.
  virtual torch::Tensor forward_loss(const Batch& batch, int64_t step, bool first_micro_batch,
                                     std::vector<torch::Tensor>* block_outputs = nullptr) = 0;
  virtual const AutocastState& autocast_state() const = 0;

  virtual Snapshot snapshot() = 0;
  // The same state copied straight into host memory: for a check that holds it across steps,
  // where a device copy would take the model's and optimizer's size again (~16 GB at 1.3B).
  virtual Snapshot snapshot_to_host() = 0;
  // A reload as a checkpoint loader does it: parameters copied into, the optimizer state copied
  // back into its buffers.
  virtual void restore(Snapshot snap) = 0;
  // Runs the next step without publishing it (no observer sees it, no validation): a replay.
  // `fp32`: with autocast off (an anomaly re-run's precision check).
  virtual StepValues run_unpublished_step(bool fp32 = false) = 0;
  virtual bool replaying() const = 0;
  // This rank's whole training state in `dir` (replaced if there; no manifest, never resumed),
  // written and read back by the checkpoint format's own code, so what a check measures after
  // the reload is what the real loader leaves behind.
  virtual PrivateCheckpoint save_private_checkpoint(const std::filesystem::path& dir) = 0;
  virtual void load_private_checkpoint(const PrivateCheckpoint& checkpoint) = 0;

  // The hooks hear `phase` of `step` (the watchdog names it in a hang).
  virtual void enter_phase(const char* phase, int64_t step) = 0;
};

}  // namespace rcl
