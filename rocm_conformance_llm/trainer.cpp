#include "rocm_conformance_llm/trainer.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/diagnostics/op_counter.hpp"
#include "rocm_conformance_llm/diagnostics/watchdog.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"
#include "rocm_conformance_llm/utils/strings.hpp"

namespace rcl {
namespace {

using Clock = SteadyClock;

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

// Blocks until the device has run everything queued so far (no-op on CPU, which is synchronous).
void wait_for_device(const torch::Device& device) {
  if (device.type() != torch::kCPU) current_stream(device).synchronize();
}

// Per-phase wall time. Only with cfg.phase_timing: each phase boundary then waits for the
// device so a phase is charged for its own kernels, which serialises host and GPU.
class PhaseTimer {
 public:
  class Scope {
   public:
    Scope(const PhaseTimer* timer, const char* phase) : timer_(timer), phase_(phase) {
      if (timer_) wait_for_device(timer_->device_);
      start_ = Clock::now();
    }
    ~Scope() {
      if (!timer_) return;
      wait_for_device(timer_->device_);
      (*timer_->out_)[phase_] += seconds_since(start_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const PhaseTimer* timer_;
    const char* phase_;
    Clock::time_point start_;
  };

  PhaseTimer(bool enabled, torch::Device device, std::map<std::string, double>& out)
      : enabled_(enabled), device_(device), out_(&out) {}
  Scope measure(const char* phase) const { return Scope(enabled_ ? this : nullptr, phase); }

 private:
  bool enabled_;
  torch::Device device_;
  std::map<std::string, double>* out_;
};

// Device scalars on their way to the host. The copy is queued behind the step's kernels into
// pinned memory and read one step later, by which time it has landed: logging never drains
// the GPU queue. On CPU the copy is immediate.
class DeferredScalars {
 public:
  explicit DeferredScalars(const std::vector<torch::Tensor>& scalars) {
    const auto stacked = torch::stack(scalars).to(torch::kDouble);
    if (stacked.device().is_cpu()) {
      host_ = stacked;
      return;
    }
    host_ = torch::empty(stacked.sizes(), torch::TensorOptions().dtype(torch::kDouble).pinned_memory(true));
    host_.copy_(stacked, /*non_blocking=*/true);
    ready_.emplace(stacked.device().type());
    ready_->record(current_stream(stacked.device()));
  }

  std::vector<double> get() const {
    // c10::Event has no blocking wait in libtorch 1.13; by now it has almost always fired.
    while (ready_ && !ready_->query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    const auto* data = host_.data_ptr<double>();
    return {data, data + host_.numel()};
  }

 private:
  torch::Tensor host_;
  std::optional<c10::Event> ready_;
};

torch::Tensor zero_scalar(const torch::Device& device) {
  return torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
}

// The watchdog's "last collective": the step's final gradient all-reduce.
std::string describe_last_collective(const std::vector<CollectiveSample>& collectives) {
  if (collectives.empty()) return {};
  const auto& c = collectives.back();
  return fmt::format("{} of {} bytes (sequence {})", c.op, c.bytes, c.sequence);
}

}  // namespace

struct Trainer::PendingStep {
  StepRecord record;
  DeferredScalars scalars;  // {mean loss, grad norm}
};

double learning_rate_at(const TrainingConfig& cfg, int64_t step) {
  if (step <= cfg.warmup_steps) return cfg.learning_rate * double(step) / double(cfg.warmup_steps);
  const double min_lr = cfg.learning_rate * cfg.min_lr_ratio;
  const double progress =
      std::min(1.0, double(step - cfg.warmup_steps) / double(std::max<int64_t>(1, cfg.steps - cfg.warmup_steps)));
  return min_lr + 0.5 * (cfg.learning_rate - min_lr) * (1.0 + std::cos(M_PI * progress));
}

Trainer::Trainer(RunContext ctx, std::shared_ptr<GradientSync> sync, ModelOptions model_options)
    : ctx_(std::move(ctx)), sync_(std::move(sync)), diag_(make_inert_diagnostics()) {
  auto& cfg = ctx_.cfg;
  validate(cfg);
  const auto& device = ctx_.device;
  set_deterministic(cfg.deterministic);

  data_ = make_data_source(cfg, sync_->rank(), sync_->world_size(), device);
  if (cfg.vocab_size == 0) cfg.vocab_size = data_->vocab_size();

  // Every rank draws the initial weights from the same seed: replicas must start identical.
  // Then each rank continues from its own seed, so dropout masks differ across ranks.
  seed_everything(cfg.seed, device);
  model_ = GPT(cfg, model_options);
  model_->to(device);
  seed_everything(rank_seed(cfg.seed, sync_->rank()), device);
  optimizer_ = std::make_unique<FlatAdamW>(model_->decay_parameters(), model_->no_decay_parameters(),
                                           AdamWHyper{.weight_decay = cfg.weight_decay});

  autocast_ = autocast_for(cfg.mixed_precision);
  if (cfg.mixed_precision == "fp16") scaler_.emplace(cfg.fp16_initial_loss_scale, cfg.fp16_growth_interval);

  if (cfg.memory_pressure_bytes > 0) {
    // Held for the whole run: the ROCr allocator serves every step from what is left.
    ballast_ = torch::zeros({cfg.memory_pressure_bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
    spdlog::info("memory pressure: holding {} MiB of ballast on {}", cfg.memory_pressure_bytes >> 20, device.str());
  }
  spdlog::info("model: {} parameters, {:.3g} training FLOPs/token; data: {}", parameter_count(cfg),
               flops_per_token(cfg), data_->describe());
}

void Trainer::add_observer(StepObserver* observer) { observers_.push_back(observer); }

std::optional<double> Trainer::evaluate() {
  if (!data_->has_validation()) return std::nullopt;
  torch::NoGradGuard no_grad;
  model_->eval();
  enter_phase(phase::eval, step_);
  auto total = zero_scalar(ctx_.device);
  for (int64_t i = 0; i < ctx_.cfg.eval_batches; ++i) {
    const Batch batch = data_->val_batch(i);
    AutocastGuard autocast(ctx_.device.type(), autocast_);
    total += lm_loss(model_->forward(batch.inputs), batch.targets);
  }
  model_->train();
  return total.item<double>() / double(ctx_.cfg.eval_batches);
}

// One optimizer step, in the order the work happens.
Trainer::PendingStep Trainer::train_step() {
  const auto& cfg = ctx_.cfg;
  const auto& device = ctx_.device;
  const auto start = Clock::now();
  StepRecord rec;
  rec.step = ++step_;
  rec.rank = sync_->rank();
  rec.world_size = sync_->world_size();
  rec.lr = learning_rate_at(cfg, rec.step);
  sync_->begin_step(rec.step);
  const PhaseTimer phases(cfg.phase_timing, device, rec.phase_s);
  // Op fingerprint of the step's own work (not eval, not the checks): a changed count between
  // runs of one config is a changed kernel path. Costs a lock per op, so only every N steps.
  std::optional<OpCounter> op_counter;
  if (checking() && ctx_.diag.fingerprint_interval > 0 && rec.step % ctx_.diag.fingerprint_interval == 0)
    op_counter.emplace();

  optimizer_->zero_grad();
  auto loss_sum = zero_scalar(device);
  const int64_t first_micro_batch = micro_batches_;
  for (int64_t micro = 0; micro < cfg.grad_accum_steps; ++micro) {
    Batch batch;
    {
      enter_phase(phase::data, rec.step);
      auto timing = phases.measure("data");
      batch = data_->train_batch(micro_batches_++);
    }
    torch::Tensor loss;
    {
      enter_phase(phase::forward, rec.step);
      auto timing = phases.measure("forward");
      AutocastGuard autocast(device.type(), autocast_);
      loss = forward_loss(batch, rec.step, micro == 0);
    }
    // The micro-batch's loss is known here (mean cross-entropy, float32).
    loss_sum += loss.detach();
    {
      enter_phase(phase::backward, rec.step);
      auto timing = phases.measure("backward");  // outside autocast, as autograd expects
      auto objective = loss / double(cfg.grad_accum_steps);
      (scaler_ ? scaler_->scale(objective) : objective).backward();
    }
    // Averaging is linear, so syncing every grad_sync_interval micro-steps and once more at
    // the end of the window yields the same gradient as one sync at the end; only the
    // number of all-reduces (the comm stress) changes.
    if ((micro + 1) % cfg.grad_sync_interval == 0 || micro + 1 == cfg.grad_accum_steps) {
      enter_phase(phase::grad_sync, rec.step);
      auto timing = phases.measure("grad_sync");
      // In buffer order, so that each gradient bucket is a view of the flat gradient.
      sync_->average_gradients(optimizer_->parameters(), rec.collectives);
    }
  }

  // Gradients are final here: averaged across ranks, still loss-scaled under fp16.
  inject_after_grad_sync(rec.step);
  diagnose_nonfinite_loss(loss_sum, rec.step, first_micro_batch);
  torch::Tensor grad_norm;
  {
    enter_phase(phase::optimizer, rec.step, describe_last_collective(rec.collectives));
    auto timing = phases.measure("optimizer");
    rec.loss_scale = scaler_ ? scaler_->current_scale() : 1.0;
    rec.skipped = scaler_ && scaler_->unscale_and_check(optimizer_->flat_grads());
    grad_norm = optimizer_->clip_grad_norm(cfg.grad_clip);
    if (!rec.skipped) optimizer_->step(rec.lr);
    if (scaler_) scaler_->update(rec.skipped, rec.step);
  }
  if (op_counter) {
    op_counter->stop();
    rec.op_counts = op_counter->counts();
  }

  rec.tokens = cfg.grad_accum_steps * cfg.batch_size * cfg.seq_len;
  inject_slow_step(rec.step, seconds_since(start));
  rec.step_time_s = seconds_since(start);
  rec.tokens_per_s = double(rec.tokens) / rec.step_time_s;
  inject_memory_leak(rec.step);
  rec.memory = sample_memory(device);
  // Validation and the checks are outside step_time_s: those steps must not look slow.
  if (cfg.eval_interval > 0 && rec.step % cfg.eval_interval == 0 && !replaying()) rec.val_loss = evaluate();
  gemm_canary_check(rec.step);
  return PendingStep{std::move(rec), DeferredScalars({loss_sum / double(cfg.grad_accum_steps), grad_norm})};
}

double Trainer::run_unpublished_step() { return train_step().scalars.get()[0]; }

void Trainer::publish(PendingStep& pending, TrainSummary& summary) {
  auto& rec = pending.record;
  const auto values = pending.scalars.get();
  record_replayed_loss(rec.step, values[0]);
  enter_phase(phase::loss_allreduce, rec.step);
  rec.loss = sync_->mean_across_ranks(values[0]);
  rec.grad_norm = values[1];
  summary.losses.push_back(rec.loss);
  if (rec.val_loss) summary.final_val_loss = rec.val_loss;
  // With several ranks the observers include the comm monitor's cross-rank checks (RCCL).
  if (rec.world_size > 1) enter_phase(phase::checksum, rec.step);
  for (auto* observer : observers_) observer->on_step(rec);
}

TrainSummary Trainer::run() {
  const auto& cfg = ctx_.cfg;
  TrainSummary summary;
  summary.loss_floor = data_->loss_floor();
  const auto start = Clock::now();
  double timed_s = 0;  // steps after the first, which pays for kernel selection and warm-up
  int64_t timed_tokens = 0;

  // Step N's record is published after step N+1 has been queued, when its loss has reached
  // the host without stalling the device.
  std::optional<PendingStep> pending;
  while (step_ < cfg.steps) {
    PendingStep current = train_step();
    if (current.record.step > 1) {
      timed_s += current.record.step_time_s;
      timed_tokens += current.record.tokens;
    }
    if (pending) publish(*pending, summary);
    pending.emplace(std::move(current));
    replay_check(step_);
    // Ranks' clocks differ: stop when any rank's time is up, all at the same step, or the
    // others would wait forever in the next collective.
    const bool time_up = cfg.max_duration_s > 0 && step_ < cfg.steps &&
                         sync_->mean_across_ranks(seconds_since(start) >= cfg.max_duration_s ? 1.0 : 0.0) > 0;
    if (time_up) {
      summary.stopped_by_time = true;
      spdlog::info("max_duration_s={} reached after {} of {} steps", cfg.max_duration_s, step_, cfg.steps);
      break;
    }
  }
  publish(*pending, summary);
  if (!pending->record.val_loss) summary.final_val_loss = evaluate();

  summary.steps_done = step_;
  summary.skipped_steps = scaler_ ? scaler_->skipped_steps() : 0;
  summary.mean_tokens_per_s = timed_s > 0 ? double(timed_tokens) / timed_s : pending->record.tokens_per_s;
  summary.wall_s = seconds_since(start);
  return summary;
}

}  // namespace rcl
