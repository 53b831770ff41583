// The training loop: forward, backward, gradient accumulation and synchronisation, clipping,
// AdamW with warm-up + cosine decay, mixed precision, periodic validation, and one StepRecord
// per optimizer step handed to every observer. Device-agnostic libtorch: the same code runs on
// CPU and on a ROCm GPU (torch::kCUDA is the HIP device there).
//
// Diagnostics and fault injection act through StepHooks (loop/step_hooks.hpp) at fixed points of
// the step; the public "for the loop-side checks" members let those checks re-run a forward,
// rewind to a snapshot, and replay steps.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/grad_sync.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

struct RunContext {
  TrainingConfig cfg;
  DiagnosticsConfig diag;
  torch::Device device{torch::kCPU};
  std::filesystem::path output_dir;
};

// Whether steps on a GPU are timed with device events (c10::Event with elapsedTime: libtorch
// 2.x); otherwise, and always on the CPU, step_time_s is the host's clock.
bool device_step_timing_available();

struct TrainSummary {
  std::vector<double> losses;  // one per optimizer step
  std::optional<double> final_val_loss;
  std::optional<double> loss_floor;  // the data source's ideal loss, when known
  double mean_tokens_per_s = 0;      // this rank, excluding step 1 (kernel selection, warm-up)
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;         // fp16 overflow skips
  bool stopped_by_time = false;      // cfg.max_duration_s reached before cfg.steps
  bool stopped_by_request = false;   // the stop check (set_stop_check) said so on some rank
  double wall_s = 0;
};

// Learning rate of 1-based optimizer step `step`: linear warm-up over cfg.warmup_steps, then
// cosine decay to cfg.learning_rate * cfg.min_lr_ratio at cfg.steps.
double learning_rate_at(const TrainingConfig& cfg, int64_t step);

class Trainer {
 public:
  // Builds the data source, resolves cfg.vocab_size from it when 0, builds the model (same
  // initial weights on every rank), the optimizer and, for fp16, the loss scaler.
  explicit Trainer(RunContext ctx, std::shared_ptr<GradientSync> sync = std::make_shared<LocalSync>(),
                   ModelOptions model_options = {});

  // Observers see each step in order, one step after it ran (see run()).
  void add_observer(StepObserver* observer);
  // Hooks are called in the order added, at the points StepHooks names.
  void add_hooks(StepHooks* hooks);
  // Asked between steps (a stop signal, run/signals.hpp); when it says true on any rank, every rank
  // stops after the same step and run() returns without the final evaluation.
  void set_stop_check(std::function<bool()> check) { stop_check_ = std::move(check); }
  TrainSummary run();

  // Mean loss over cfg.eval_batches validation batches; nullopt when the data has none.
  std::optional<double> evaluate();

  GPT& model() { return model_; }
  const DataSource& data() const { return *data_; }
  const RunContext& ctx() const { return ctx_; }  // cfg.vocab_size resolved
  GradientSync& sync() { return *sync_; }
  int64_t steps_done() const { return step_; }
  // Memory after the model was built and after it moved to the device (--memory-profile).
  const std::vector<std::pair<std::string, MemorySample>>& setup_memory() const { return setup_memory_; }

  // --- for the loop-side checks ---
  // Everything a step reads or changes: what a checkpoint holds, plus the RNG and data cursor.
  struct Snapshot {
    torch::Tensor params;  // FlatAdamW's flat parameter buffer
    FlatAdamW::State optimizer;
    std::optional<DynamicLossScaler> scaler;
    RngSnapshot rng;
    int64_t step = 0;
    int64_t micro_batches = 0;
    torch::Tensor update_withheld;
  };
  Snapshot snapshot();
  // A reload as a checkpoint loader does it: parameters copied into (load_state_dict), the
  // optimizer state copied back into its buffers (Optimizer::load).
  void restore(Snapshot snap);
  // The device flag that withholds updates after a non-finite step until the host has read it.
  // No checkpoint holds it (a resumed run starts clear); a reload inside the run puts it back.
  torch::Tensor withheld_flag() const { return update_withheld_.clone(); }
  void set_withheld_flag(const torch::Tensor& flag) { update_withheld_.copy_(flag); }
  // What the host reads of a step.
  struct StepValues {
    double loss = 0, grad_norm = 0;
  };
  // Runs the next step without publishing it (no observer sees it, no validation): a replay.
  // `fp32`: with autocast off (an anomaly re-run's precision check).
  StepValues run_unpublished_step(bool fp32 = false);
  bool replaying() const { return replaying_; }
  // Micro-batch forward and loss, through the hooks (the caller sets autocast);
  // `block_outputs` as in GPTImpl::forward.
  torch::Tensor forward_loss(const Batch& batch, int64_t step, bool first_micro_batch,
                             std::vector<torch::Tensor>* block_outputs = nullptr);
  const AutocastState& autocast_state() const { return autocast_; }
  void enter_phase(const char* phase, int64_t step) { hooks_.on_phase(phase, step, {}); }

 private:
  struct PendingStep;
  class Phase;
  class StepClock;

  PendingStep train_step();
  StepRecord begin_step();  // the record's identity, the LR, the hooks told
  void finish_step(StepRecord& rec, StepClock& clock);
  void publish(PendingStep& pending, TrainSummary& summary);
  // After the host has read a non-finite step (and the observers localised it): the updates
  // withheld on the device since then are released and uncounted.
  void release_withheld_updates(int64_t first_step);
  // One phase of step `rec.step`: the hooks hear of it, and with cfg.phase_timing it is timed
  // into rec.phase_s.
  Phase enter(const char* name, StepRecord& rec, std::string last_collective = {});

  RunContext ctx_;
  std::shared_ptr<GradientSync> sync_;
  std::unique_ptr<DataSource> data_;
  GPT model_{nullptr};
  std::unique_ptr<FlatAdamW> optimizer_;
  AutocastState autocast_;
  std::optional<DynamicLossScaler> scaler_;  // fp16 only
  torch::Tensor ballast_;                    // cfg.memory_pressure_bytes held on the device
  std::vector<std::pair<std::string, MemorySample>> setup_memory_;
  std::vector<StepObserver*> observers_;
  StepHookList hooks_;
  std::function<bool()> stop_check_;
  int64_t step_ = 0;           // optimizer steps done
  int64_t micro_batches_ = 0;  // data cursor: micro-batches consumed
  bool replaying_ = false;
  // Device bool: set by a non-finite loss or gradient norm, it withholds every update until the
  // host has read that step (one step late) and cleared it; the weights stay as they were.
  torch::Tensor update_withheld_;
  int64_t withheld_released_through_ = 0;  // steps up to here are already accounted for
  std::deque<int64_t> queued_updates_;      // recent steps whose optimizer update was queued
  std::optional<HostReadCounter> host_reads_;  // diag.count_host_reads
  int64_t reads_at_step_begin_ = 0, reads_in_previous_step_ = 0;
};

}  // namespace rcl
