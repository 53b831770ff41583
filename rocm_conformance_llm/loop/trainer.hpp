// The training loop: forward, backward, gradient accumulation and synchronisation, clipping,
// AdamW with warm-up + cosine decay, mixed precision, periodic validation, and one StepRecord
// per optimizer step handed to every observer. Device-agnostic libtorch: the same code runs on
// CPU and on a ROCm GPU (torch::kCUDA is the HIP device there).
//
// Diagnostics and fault injection act through StepHooks (loop/step_hooks.hpp) at fixed points of
// the step; the loop-side checks reach the loop only through LoopAccess (loop/loop_access.hpp),
// which the Trainer implements privately: its own public members are the run's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/loop/loop_access.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"
#include "rocm_conformance_llm/loop/update_guard.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/transport/grad_sync.hpp"
#include "rocm_conformance_llm/workload/optimizer.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {

// Whether steps on a GPU are timed with device events (c10::Event with elapsedTime: libtorch
// 2.x); otherwise, and always on the CPU, step_time_s is the host's clock.
bool device_step_timing_available();

struct TrainSummary {
  std::vector<double> losses;  // one per optimizer step
  std::optional<double> final_val_loss;
  std::optional<double> loss_floor;  // the data source's ideal loss, when known
  double mean_tokens_per_s = 0;      // this rank, excluding step 1 (kernel selection, warm-up)
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;        // fp16 overflow skips
  bool stopped_by_time = false;     // cfg.max_duration_s reached before cfg.steps
  bool stopped_by_request = false;  // the stop check (set_stop_check) said so on some rank
  double wall_s = 0;
};

// Learning rate of 1-based optimizer step `step`: linear warm-up over cfg.warmup_steps, then
// cosine decay to cfg.learning_rate * cfg.min_lr_ratio at cfg.steps.
double learning_rate_at(const TrainingConfig& cfg, int64_t step);

class Trainer final : public LoopAccess {
 public:
  // Builds the data source (on ctx.data where the run opened it), resolves cfg.vocab_size from
  // it when 0, builds the model (same initial weights on every rank), the optimizer and, for
  // fp16, the loss scaler.
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

  GPT& model() override { return model_; }
  const DataSource& data() const { return *data_; }
  // The model's configuration as built: cfg.vocab_size resolved from the data.
  const TrainingConfig& model_config() const { return ctx_.cfg; }
  int64_t steps_done() const { return step_; }
  // Which shard of the optimizer's flat buffer this rank updates (ZeRO, FSDP: one per rank).
  const ShardOf& optimizer_shard() const { return optimizer_->shard(); }
  // Memory after the model was built and after it moved to the device (--memory-profile).
  const std::vector<std::pair<std::string, MemorySample>>& setup_memory() const { return setup_memory_; }

 private:
  // LoopAccess: for the loop-side checks (and the checkpoints), through the interface only.
  const RunContext& ctx() const override { return ctx_; }
  int rank() const override { return sync_->rank(); }
  int world_size() const override { return sync_->world_size(); }
  double mean_across_ranks(double value) override { return sync_->mean_across_ranks(value); }
  Batch train_batch(int64_t index) const override { return data_->train_batch(index); }
  torch::Tensor forward_loss(const Batch& batch, int64_t step, bool first_micro_batch,
                             std::vector<torch::Tensor>* block_outputs = nullptr) override;
  const AutocastState& autocast_state() const override { return autocast_; }
  Snapshot snapshot() override;
  Snapshot snapshot_to_host() override;
  void restore(Snapshot snap) override;
  StepValues run_unpublished_step(bool fp32 = false) override;
  bool replaying() const override { return replaying_; }
  PrivateCheckpoint save_private_checkpoint(const std::filesystem::path& dir) override;
  void load_private_checkpoint(const PrivateCheckpoint& checkpoint) override;
  void enter_phase(const char* phase, int64_t step) override { hooks_.on_phase(phase, step, {}); }

  struct PendingStep;
  class Phase;
  class StepClock;

  // Mean loss over cfg.eval_batches validation batches; nullopt when the data has none.
  std::optional<double> evaluate();
  PendingStep train_step();
  StepRecord begin_step();  // the record's identity, the LR, the hooks told
  void finish_step(StepRecord& rec, StepClock& clock);
  void publish(PendingStep& pending, TrainSummary& summary);
  Snapshot snapshot_on(const torch::Device& where);
  // One phase of step `rec.step`: the hooks hear of it, and with cfg.phase_timing it is timed
  // into rec.phase_s. `collectives`: as StepHooks::on_phase.
  Phase enter(const char* name, StepRecord& rec, const std::vector<CollectiveSample>& collectives = {});

  RunContext ctx_;
  std::shared_ptr<GradientSync> sync_;
  std::unique_ptr<DataSource> data_;
  GPT model_{nullptr};
  std::unique_ptr<FlatAdamW> optimizer_;
  AutocastState autocast_;
  std::optional<DynamicLossScaler> scaler_;  // fp16 only
  UpdateGuard update_guard_;
  std::vector<std::pair<std::string, MemorySample>> setup_memory_;
  std::vector<StepObserver*> observers_;
  StepHookList hooks_;
  std::function<bool()> stop_check_;
  int64_t step_ = 0;           // optimizer steps done
  int64_t micro_batches_ = 0;  // data cursor: micro-batches consumed
  bool replaying_ = false;
};

}  // namespace rcl
