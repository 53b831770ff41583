// The training loop: forward, backward, gradient accumulation and synchronisation, clipping,
// AdamW with warm-up + cosine decay, mixed precision, periodic validation, and one StepRecord
// per optimizer step handed to every observer. Device-agnostic libtorch: the same code runs on
// CPU and on a ROCm GPU (torch::kCUDA is the HIP device there).
//
// With diagnostics attached the loop also reports its phase to the hang watchdog, injects the
// --inject faults at their steps, and runs the active checks that need the loop's own state
// (trainer_diagnostics.cpp): GEMM shape canaries, op-count fingerprints, localisation of the
// first non-finite loss, and in rng mode rewind-and-replay, RNG-restore, cross-rank dropout
// mask and memory-after-reload checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/diagnostics/finding.hpp"
#include "rocm_conformance_llm/diagnostics/rng_checks.hpp"
#include "rocm_conformance_llm/distributed/grad_sync.hpp"
#include "rocm_conformance_llm/faults.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/optimizer.hpp"
#include "rocm_conformance_llm/precision.hpp"
#include "rocm_conformance_llm/step_record.hpp"

namespace rcl {

struct RunContext {
  TrainingConfig cfg;
  DiagnosticsConfig diag;
  std::vector<std::string> stress_modes;
  torch::Device device{torch::kCPU};
  std::filesystem::path output_dir;
};

class Watchdog;

// The run's diagnostics as the loop sees them. Every member is optional: without them (unit
// tests) the loop trains exactly the same, reports no phase, injects nothing and runs no
// active check.
struct TrainerDiagnostics {
  FindingLog* findings = nullptr;     // active checks report here; nullptr: active checks off
  Watchdog* watchdog = nullptr;       // told the phase and step the loop is in
  const FaultPlan* faults = nullptr;  // --inject
  GatherValues all_gather;            // several ranks: enables the cross-rank dropout-mask check
};

struct TrainSummary {
  std::vector<double> losses;  // one per optimizer step
  std::optional<double> final_val_loss;
  std::optional<double> loss_floor;  // the data source's ideal loss, when known
  double mean_tokens_per_s = 0;      // this rank, excluding step 1 (kernel selection, warm-up)
  int64_t steps_done = 0;
  int64_t skipped_steps = 0;         // fp16 overflow skips
  bool stopped_by_time = false;      // cfg.max_duration_s reached before cfg.steps
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

  // Before run(). Active checks run only when `diagnostics.findings` is set and
  // ctx.diag.enabled; building the GEMM canary's float64 references happens here.
  void attach_diagnostics(TrainerDiagnostics diagnostics);

  // Observers see each step in order, one step after it ran (see run()).
  void add_observer(StepObserver* observer);
  TrainSummary run();

  // Mean loss over cfg.eval_batches validation batches; nullopt when the data has none.
  std::optional<double> evaluate();

  GPT& model() { return model_; }
  const DataSource& data() const { return *data_; }
  const RunContext& ctx() const { return ctx_; }  // cfg.vocab_size resolved
  GradientSync& sync() { return *sync_; }
  int64_t steps_done() const { return step_; }

 private:
  struct PendingStep;
  struct Diagnostics;  // trainer_diagnostics.cpp
  struct Snapshot;     // trainer_diagnostics.cpp

  PendingStep train_step();
  void publish(PendingStep& pending, TrainSummary& summary);

  double run_unpublished_step();  // a replay's step: this rank's loss, no observer sees it

  // --- diagnostics (trainer_diagnostics.cpp) ---
  static std::shared_ptr<Diagnostics> make_inert_diagnostics();
  void enter_phase(const char* phase, int64_t step, std::string last_collective = {});
  const FaultSpec* active_fault(FaultKind kind, int64_t step) const;  // --inject, for this rank
  bool fault(FaultKind kind, int64_t step) const;
  bool checking() const;                           // active checks on, and not inside a replay
  bool replaying() const;
  void report(std::optional<Finding> finding);
  // Micro-batch forward and loss (the caller sets autocast), with the nan / hang / loss-spike
  // faults; `block_outputs` as in GPTImpl::forward.
  torch::Tensor forward_loss(const Batch& batch, int64_t step, bool first_micro_batch,
                             std::vector<torch::Tensor>* block_outputs = nullptr);
  void inject_after_grad_sync(int64_t step);             // grad-bitflip
  void inject_slow_step(int64_t step, double elapsed_s);  // inside step time
  void inject_memory_leak(int64_t step);
  // Once per run: where the first non-finite loss came from, before the update spreads it.
  void diagnose_nonfinite_loss(const torch::Tensor& loss_sum, int64_t step, int64_t first_micro_batch);
  void gemm_canary_check(int64_t step);                        // outside step time
  void replay_check(int64_t step);                              // rng mode, outside step time
  void record_replayed_loss(int64_t step, double local_loss);  // from publish()
  Snapshot snapshot();
  void restore(Snapshot snap);

  RunContext ctx_;
  std::shared_ptr<GradientSync> sync_;
  std::unique_ptr<DataSource> data_;
  GPT model_{nullptr};
  std::unique_ptr<FlatAdamW> optimizer_;
  AutocastState autocast_;
  std::optional<DynamicLossScaler> scaler_;  // fp16 only
  torch::Tensor ballast_;                    // cfg.memory_pressure_bytes held on the device
  std::vector<StepObserver*> observers_;
  int64_t step_ = 0;           // optimizer steps done
  int64_t micro_batches_ = 0;  // data cursor: micro-batches consumed
  // Never null; inert until attach_diagnostics. shared_ptr: its deleter is bound where the type
  // is complete, so this header and trainer.cpp need not see it.
  std::shared_ptr<Diagnostics> diag_;
};

}  // namespace rcl
