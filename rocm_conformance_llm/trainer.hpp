// The training loop: forward, backward, gradient accumulation and synchronisation, clipping,
// AdamW with warm-up + cosine decay, mixed precision, periodic validation, and one StepRecord
// per optimizer step handed to every observer. Device-agnostic libtorch: the same code runs on
// CPU and on a ROCm GPU (torch::kCUDA is the HIP device there).
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
#include "rocm_conformance_llm/distributed/grad_sync.hpp"
#include "rocm_conformance_llm/model.hpp"
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

// torch::nn::utils::clip_grad_norm_ without its host read-back: returns the total L2 norm of
// the gradients (before clipping) as a device scalar, so the step never waits for the GPU.
// max_norm 0 measures without clipping.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

class Trainer {
 public:
  // Builds the data source, resolves cfg.vocab_size from it when 0, builds the model (same
  // initial weights on every rank), the optimizer and, for fp16, the loss scaler.
  explicit Trainer(RunContext ctx, std::shared_ptr<GradientSync> sync = std::make_shared<LocalSync>(),
                   ModelOptions model_options = {});

  // Observers see each step in order, one step after it ran (see run()).
  void add_observer(StepObserver* observer);
  TrainSummary run();

  // Mean loss over cfg.eval_batches validation batches; nullopt when the data has none.
  std::optional<double> evaluate();

  GPT& model() { return model_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }
  const DataSource& data() const { return *data_; }
  const RunContext& ctx() const { return ctx_; }  // cfg.vocab_size resolved
  GradientSync& sync() { return *sync_; }
  int64_t steps_done() const { return step_; }

 private:
  struct PendingStep;
  PendingStep train_step();
  void publish(PendingStep& pending, TrainSummary& summary);

  RunContext ctx_;
  std::shared_ptr<GradientSync> sync_;
  std::unique_ptr<DataSource> data_;
  GPT model_{nullptr};
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  AutocastState autocast_;
  std::optional<DynamicLossScaler> scaler_;  // fp16 only
  torch::Tensor ballast_;                    // cfg.memory_pressure_bytes held on the device
  std::vector<StepObserver*> observers_;
  int64_t step_ = 0;           // optimizer steps done
  int64_t micro_batches_ = 0;  // data cursor: micro-batches consumed
};

}  // namespace rcl
