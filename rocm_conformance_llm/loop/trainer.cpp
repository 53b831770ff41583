#include "rocm_conformance_llm/loop/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/loop/training_state.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"

namespace rcl {
namespace {

using Clock = SteadyClock;

// Blocks until the device has run everything queued so far (no-op on CPU, which is synchronous).
void wait_for_device(const torch::Device& device) {
  if (device.type() == torch::kCPU) return;
  note_device_wait();
  current_stream(device).synchronize();
}

torch::Tensor zero_scalar(const torch::Device& device) {
  return torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
}

}  // namespace

bool device_step_timing_available() { return DeviceInterval::available(); }

// A step's time. On a GPU the host's clock stops when the last kernel is queued, not when it
// has run (tokens/s came out 1.6-3% high on an H100 timed that way), so where c10::Event can
// time, a DeviceInterval brackets the step on the device's stream and is read when the step is
// published, by which time the deferred scalars (queued after its end) have landed. On the CPU
// the host clock is the device's.
class Trainer::StepClock {
 public:
  explicit StepClock(const torch::Device& device) : start_(Clock::now()) {
    if (!device.is_cpu() && DeviceInterval::available()) on_device_.emplace(device);
  }
  double host_seconds() const { return seconds_since(start_); }
  HostLoadSample host_load() const { return host_load_.sample(); }
  void stop() {
    if (on_device_) on_device_->stop();
    stopped_ = true;
  }
  // The device's time for the step, once stopped; nullopt where only the host clock exists.
  std::optional<double> device_seconds() const {
    if (!on_device_ || !stopped_) return std::nullopt;
    return on_device_->seconds();
  }

 private:
  Clock::time_point start_;
  HostLoadMeter host_load_;  // from the same start: was the step slow because the host was busy?
  std::optional<DeviceInterval> on_device_;
  bool stopped_ = false;
};

struct Trainer::PendingStep {
  StepRecord record;
  DeferredScalars scalars;  // {mean loss, grad norm}
  StepClock clock;
};

// RAII: the hooks hear the phase on entry (the watchdog's view). When timed (cfg.phase_timing)
// both boundaries wait for the device so a phase is charged for its own kernels, which
// serialises host and GPU: that is why timing is optional.
class Trainer::Phase {
 public:
  Phase(StepHooks& hooks, const char* name, int64_t step, const std::vector<CollectiveSample>& collectives,
        const torch::Device& device, std::map<std::string, double>* timings)
      : name_(name), device_(device), timings_(timings) {
    hooks.on_phase(name, step, collectives);
    if (timings_) wait_for_device(device_);
    start_ = Clock::now();
  }
  ~Phase() {
    if (!timings_) return;
    wait_for_device(device_);
    (*timings_)[name_] += seconds_since(start_);
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const char* name_;
  torch::Device device_;
  std::map<std::string, double>* timings_;
  Clock::time_point start_;
};

double learning_rate_at(const TrainingConfig& cfg, int64_t step) {
  if (step <= cfg.warmup_steps) return cfg.learning_rate * double(step) / double(cfg.warmup_steps);
  const double min_lr = cfg.learning_rate * cfg.min_lr_ratio;
  const double progress =
      std::min(1.0, double(step - cfg.warmup_steps) / double(std::max<int64_t>(1, cfg.steps - cfg.warmup_steps)));
  return min_lr + 0.5 * (cfg.learning_rate - min_lr) * (1.0 + std::cos(M_PI * progress));
}

Trainer::Trainer(RunContext ctx, std::shared_ptr<GradientSync> sync, ModelOptions model_options)
    : ctx_(std::move(ctx)), sync_(std::move(sync)), update_guard_(ctx_.device) {
  auto& cfg = ctx_.cfg;
  validate(cfg);
  const auto& device = ctx_.device;
  require_resolved(cfg.attention_backend, "the trainer");
  // Under "replay" the replay check switches them on around the steps it compares.
  set_deterministic(determinism_of(cfg) == Determinism::all);

  // The ranks of one tensor-parallel group are one data-parallel replica: the same batches.
  const DataReplica replica = sync_->data_replica();
  data_ = make_data_source(cfg, replica.index, replica.count, device, ctx_.data);
  if (cfg.vocab_size == 0) cfg.vocab_size = data_->vocab_size();
  if (!ctx_.hf_tokenizer) ctx_.hf_tokenizer = std::make_shared<const HfTokenizer>(read_hf_tokenizer(cfg));

  // Every rank draws the initial weights from the same seed: replicas must start identical.
  // Then each rank continues from its own seed, so dropout masks differ across ranks.
  seed_everything(cfg.seed, device);
  model_ = GPT(cfg, model_options);
  // The layout transforms the built model (tensor and expert split, FSDP's shards) around its
  // move to the device; the optimizer takes the parameters it leaves.
  const ParallelizedModel parallel = sync_->parallelize(model_, [&] {
    setup_memory_.emplace_back("after_model_creation", sample_memory(device));
    model_->to(device);
    setup_memory_.emplace_back("after_to_device", sample_memory(device));
  });
  // By replica: a tensor-parallel group draws the same dropout masks on its replicated activations.
  seed_everything(rank_seed(cfg.seed, replica.index), device);
  optimizer_ = parallel.make_optimizer(
      AdamWHyper{.weight_decay = cfg.weight_decay, .fused = fused_adamw_available(device.type())});

  autocast_ = autocast_for(cfg.mixed_precision);
  if (cfg.mixed_precision == Precision::fp16) scaler_.emplace(cfg.fp16_initial_loss_scale, cfg.fp16_growth_interval);
}

void Trainer::add_observer(StepObserver* observer) { observers_.push_back(observer); }
void Trainer::add_hooks(StepHooks* hooks) { hooks_.add(hooks); }

Trainer::Phase Trainer::enter(const char* name, StepRecord& rec, const std::vector<CollectiveSample>& collectives) {
  return Phase(hooks_, name, rec.step, collectives, ctx_.device, ctx_.cfg.phase_timing ? &rec.phase_s : nullptr);
}

std::optional<double> Trainer::evaluate() {
  if (!data_->has_validation()) return std::nullopt;
  torch::NoGradGuard no_grad;
  model_->eval();
  enter_phase(phase::eval, step_);
  auto total = zero_scalar(ctx_.device);
  for (int64_t i = 0; i < ctx_.cfg.eval_batches; ++i) {
    const Batch batch = data_->val_batch(i);
    AutocastGuard autocast(ctx_.device.type(), autocast_);
    total += model_->loss(batch.inputs, batch.targets);
  }
  model_->train();
  return total.item<double>() / double(ctx_.cfg.eval_batches);
}

torch::Tensor Trainer::forward_loss(const Batch& batch, int64_t step, bool first_micro_batch,
                                    std::vector<torch::Tensor>* block_outputs) {
  hooks_.before_forward(step, first_micro_batch);
  const auto on_logits = [this, step](torch::Tensor logits) { return hooks_.on_logits(std::move(logits), step); };
  return model_->loss(batch.inputs, batch.targets, on_logits, block_outputs);
}

// One optimizer step, in the order the work happens: data -> forward -> backward -> gradient
// sync (per micro-batch) -> optimizer. Timing, validation and the hooks' checks bracket it.
Trainer::PendingStep Trainer::train_step() {
  const auto& cfg = ctx_.cfg;
  StepClock clock(ctx_.device);
  StepRecord rec = begin_step();
  optimizer_->zero_grad();
  auto loss_sum = zero_scalar(ctx_.device);
  const int64_t first_micro_batch = micro_batches_;
  for (int64_t micro = 0; micro < cfg.grad_accum_steps; ++micro) {
    Batch batch;
    torch::Tensor loss;
    {
      auto in_phase = enter(phase::data, rec);
      batch = data_->train_batch(micro_batches_++);
    }
    {
      auto in_phase = enter(phase::forward, rec);
      AutocastGuard autocast(ctx_.device.type(), autocast_);
      loss = forward_loss(batch, rec.step, micro == 0);  // mean cross-entropy, float32
    }
    loss_sum += loss.detach();
    {
      auto in_phase = enter(phase::backward, rec);  // outside autocast, as autograd expects
      const auto objective = loss / double(cfg.grad_accum_steps);
      (scaler_ ? scaler_->scale(objective) : objective).backward();
    }
    // Averaging is linear: syncing every grad_sync_interval micro-steps and at the window's end
    // gives the gradient one sync at the end would; only the all-reduce count (comm stress) grows.
    if ((micro + 1) % cfg.grad_sync_interval == 0 || micro + 1 == cfg.grad_accum_steps) {
      auto in_phase = enter(phase::grad_sync, rec);
      sync_->sync_gradients(*optimizer_, rec.collectives);  // DDP: buckets are views; ZeRO, FSDP: reduce-scatter
      if (micro + 1 == cfg.grad_accum_steps) sync_->complete_gradients(*optimizer_, rec.collectives);
    }
  }
  hooks_.on_gradients(rec.step, optimizer_->parameters(), loss_sum, first_micro_batch);
  torch::Tensor grad_norm;
  {
    auto in_phase = enter(phase::optimizer, rec, rec.collectives);
    rec.loss_scale = scaler_ ? scaler_->current_scale() : 1.0;
    rec.skipped = scaler_ && scaler_->unscale_and_check(optimizer_->flat_grads());
    // Sharded or split, an overflow lands in one rank's shard: every rank must skip with it.
    if (scaler_ && (optimizer_->sharded() || model_->parallel().splits_model()))
      rec.skipped = sync_->mean_across_ranks(rec.skipped ? 1.0 : 0.0) > 0;
    grad_norm = optimizer_->clip_grad_norm(
        cfg.grad_clip, [&](torch::Tensor& value) { sync_->sum_over_shards(value, rec.collectives); });
    // The scaler's skip left the weights alone; otherwise the guard says on the device whether to apply.
    if (!rec.skipped) optimizer_->step(rec.lr, update_guard_.admit(loss_sum, grad_norm, rec.step, replaying_));
    if (scaler_) scaler_->update(rec.skipped, rec.step);
  }
  // ZeRO: each rank updated its shard; gather the others' (a comm phase). FSDP: the root is freed.
  if (optimizer_->sharded()) {
    auto in_phase = enter(phase::grad_sync, rec);
    sync_->after_update(*optimizer_, rec.collectives);
  }
  finish_step(rec, clock);
  return PendingStep{std::move(rec), DeferredScalars({loss_sum / double(cfg.grad_accum_steps), grad_norm}),
                     std::move(clock)};
}

StepRecord Trainer::begin_step() {
  StepRecord rec;
  rec.step = ++step_;
  rec.rank = sync_->rank();
  rec.world_size = sync_->world_size();
  rec.lr = learning_rate_at(ctx_.cfg, rec.step);
  sync_->begin_step(rec.step);
  hooks_.on_step_begin(rec.step);
  return rec;
}

// Step time, memory, and validation, which runs outside the step's time (so that it does not
// look slow); the checks that probe the device run later, between steps.
// On a GPU with timing events, step_time_s is the host's until publish() replaces it with the
// device's (the hooks here see the host's).
void Trainer::finish_step(StepRecord& rec, StepClock& clock) {
  const auto& cfg = ctx_.cfg;
  rec.tokens = cfg.grad_accum_steps * cfg.batch_size * cfg.seq_len;
  hooks_.before_step_time(rec, clock.host_seconds());
  clock.stop();
  rec.step_time_s = clock.host_seconds();
  rec.host = clock.host_load();
  rec.tokens_per_s = double(rec.tokens) / rec.step_time_s;
  rec.memory = sample_memory(ctx_.device);
  if (cfg.eval_interval > 0 && rec.step % cfg.eval_interval == 0 && !replaying_) rec.val_loss = evaluate();
}

Trainer::StepValues Trainer::run_unpublished_step(bool fp32) {
  replaying_ = true;
  const AutocastState training = autocast_;
  if (fp32) autocast_ = AutocastState{};
  const auto values = train_step().scalars.get();
  autocast_ = training;
  replaying_ = false;
  return {values[0], values[1]};
}

Trainer::Snapshot Trainer::snapshot() { return snapshot_on(ctx_.device); }

Trainer::Snapshot Trainer::snapshot_to_host() { return snapshot_on(torch::kCPU); }

Trainer::Snapshot Trainer::snapshot_on(const torch::Device& where) {
  torch::NoGradGuard no_grad;
  return Snapshot{.params = optimizer_->flat_params().to(where, /*non_blocking=*/false, /*copy=*/true),
                  .optimizer = optimizer_->state_on(where),
                  .optimizer_shard = optimizer_->shard(),
                  .scaler = scaler_,
                  .rng = capture_rng(ctx_.device),
                  .step = step_,
                  .micro_batches = micro_batches_,
                  .guard = update_guard_.state()};
}

void Trainer::restore(Snapshot snap) {
  torch::NoGradGuard no_grad;
  optimizer_->flat_params().copy_(snap.params);
  optimizer_->load_state(snap.optimizer);
  scaler_ = snap.scaler;
  restore_rng(snap.rng, ctx_.device);
  step_ = snap.step;
  micro_batches_ = snap.micro_batches;
  update_guard_.load_state(snap.guard);
}

LoopAccess::PrivateCheckpoint Trainer::save_private_checkpoint(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // What the run was is not recorded: a private checkpoint is never resumed.
  const nlohmann::json run_fields = {{"reason", "private"},
                                     {"world_size", world_size()},
                                     {"stress_modes", nlohmann::json::array()},
                                     {"training", nullptr}};
  auto snap = snapshot();
  write_training_state(*this, snap, dir, /*shared=*/true, run_fields);
  return {dir, std::move(snap.guard)};
}

void Trainer::load_private_checkpoint(const PrivateCheckpoint& checkpoint) {
  auto snap = read_training_state(*this, checkpoint.dir);
  snap.guard = checkpoint.guard;
  restore(std::move(snap));
}

void Trainer::publish(PendingStep& pending, TrainSummary& summary) {
  auto& rec = pending.record;
  const auto values = pending.scalars.get();
  if (const auto device_s = pending.clock.device_seconds()) {
    rec.step_time_s = *device_s;
    rec.tokens_per_s = double(rec.tokens) / rec.step_time_s;
    rec.step_time_clock = "device";
  }
  for (auto& c : rec.collectives)
    if (c.settle) std::exchange(c.settle, nullptr)(c);  // timed on the device (communicator.cpp)
  hooks_.on_loss(rec.step, values[0]);
  enter_phase(phase::loss_allreduce, rec.step);
  rec.loss = sync_->mean_across_ranks(values[0]);
  rec.grad_norm = values[1];
  hooks_.before_publish(rec);
  summary.losses.push_back(rec.loss);
  if (rec.val_loss) summary.final_val_loss = rec.val_loss;
  for (auto* observer : observers_) observer->on_step(rec);
  // The observers have localised the fault from the weights it left untouched.
  update_guard_.after_published(*optimizer_, rec.step, rec.skipped, values[0], values[1], step_);
}

TrainSummary Trainer::run() {
  const auto& cfg = ctx_.cfg;
  TrainSummary summary;
  summary.loss_floor = data_->loss_floor();
  const auto start = Clock::now();
  double timed_s = 0;  // steps after this process's first, which pays for kernel selection and warm-up
  int64_t timed_tokens = 0;
  const int64_t first_step = step_ + 1;  // > 1 when resumed from a checkpoint

  // Step N's record is published after step N+1 has been queued, when its loss has reached
  // the host without stalling the device.
  std::optional<PendingStep> pending;
  // After publish(): the step's device time, where there is one.
  const auto publish_and_time = [&](PendingStep& p) {
    publish(p, summary);
    if (p.record.step > first_step) {
      timed_s += p.record.step_time_s;
      timed_tokens += p.record.tokens;
    }
  };
  while (step_ < cfg.steps) {
    PendingStep current = train_step();
    if (pending) publish_and_time(*pending);
    pending.emplace(std::move(current));
    hooks_.between_steps(step_);
    // A stop request reaches ranks at different times: agree on it, as on time_up below.
    if (stop_check_ && step_ < cfg.steps && sync_->mean_across_ranks(stop_check_() ? 1.0 : 0.0) > 0) {
      summary.stopped_by_request = true;
      spdlog::warn("stop requested: stopping after {} of {} steps", step_, cfg.steps);
      break;
    }
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
  // No step ran when resumed from a checkpoint of the last step.
  if (pending) publish_and_time(*pending);
  if (!(pending && pending->record.val_loss) && !summary.stopped_by_request) summary.final_val_loss = evaluate();

  summary.steps_done = step_;
  summary.skipped_steps = scaler_ ? scaler_->skipped_steps() : 0;
  summary.mean_tokens_per_s = timed_s > 0 ? double(timed_tokens) / timed_s : pending ? pending->record.tokens_per_s : 0;
  summary.wall_s = seconds_since(start);
  return summary;
}

}  // namespace rcl
