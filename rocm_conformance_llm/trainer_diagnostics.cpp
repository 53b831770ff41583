// The training loop's side of the diagnostics: watchdog phases, the --inject faults at the
// points of the loop where the real failures strike, and the active checks that need the
// loop's own state (model, optimizer, data cursor, RNG). Step-level detectors that only read
// StepRecords are observers and live in diagnostics/.
#include <chrono>
#include <limits>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/diagnostics/gemm_canary.hpp"
#include "rocm_conformance_llm/diagnostics/memory.hpp"
#include "rocm_conformance_llm/diagnostics/numerics.hpp"
#include "rocm_conformance_llm/diagnostics/watchdog.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/trainer.hpp"
#include "rocm_conformance_llm/utils/reproducibility.hpp"

namespace rcl {
namespace {

// A persisting fault is reported at a few checks, not at every one of a long run.
constexpr int kMaxFindingsPerSignature = 5;
// loss-spike: logits this many times larger make the model confidently wrong for one step.
constexpr double kLossSpikeLogitScale = 20.0;
// grad-bitflip: the top exponent bit of a float32 (multiplies a value below 2 by 2^128).
constexpr int32_t kFloatExponentTopBit = 1 << 30;

// nan fault: one weight of block 0's FFN down projection reads as NaN for one forward, so the
// block writes NaN from finite inputs, as a GEMM that left its output unwritten does
// (rocm-libraries#9055). Written through .data(): autograd's version counter must not see it,
// so backward still runs (and spreads the NaN, as the real failure would).
class NanInFirstBlock {
 public:
  explicit NanInFirstBlock(GPT& model) : weight_(model->blocks().front()->mlp->down->weight.data()) {
    saved_ = weight_[0][0].clone();
    weight_[0][0].fill_(std::numeric_limits<double>::quiet_NaN());
  }
  ~NanInFirstBlock() { weight_[0][0].copy_(saved_); }
  NanInFirstBlock(const NanInFirstBlock&) = delete;
  NanInFirstBlock& operator=(const NanInFirstBlock&) = delete;

 private:
  torch::Tensor weight_;
  torch::Tensor saved_;
};

// hang fault: the rank stops making progress, as after a lost completion signal
// (rocm-systems#7896). Only the watchdog thread can end the run now.
[[noreturn]] void hang_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// grad-bitflip fault: flips the top exponent bit of the largest-magnitude element below 2, a
// flipped bit in a reduction buffer or in memory. The value grows by 2^128; it stays finite or
// becomes Inf depending on the device's norm accumulation. Device-side: no host read.
void flip_exponent_bit(const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(grad.scalar_type() == torch::kFloat, "grad-bitflip: float32 gradients expected");
  const auto flat = grad.view(-1);
  const auto magnitude = flat.abs();
  const auto index = torch::where(magnitude < 2.0, magnitude, torch::zeros_like(magnitude)).argmax();
  auto bits = flat.view(torch::kInt);
  bits.index_put_({index}, bits.index({index}).bitwise_xor(kFloatExponentTopBit));
}

// Names of GPTImpl::forward's block outputs: the embedding, then each block.
std::vector<NamedTensor> name_block_outputs(const std::vector<torch::Tensor>& outputs) {
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < outputs.size(); ++i)
    named.push_back({i == 0 ? std::string("embedding") : fmt::format("block{}", i - 1), outputs[i]});
  return named;
}

}  // namespace

struct Trainer::Diagnostics {
  TrainerDiagnostics wiring;
  bool checks = false;  // findings log given and diagnostics enabled
  bool replaying = false;
  bool nonfinite_diagnosed = false;
  std::optional<GemmCanary> canary;
  std::map<std::string, int> reported;
  std::vector<torch::Tensor> leaked;  // memory-leak fault: kept alive for the whole run

  // A replay check's two runs of the same steps: the first from the snapshot (unpublished), the
  // second after rewinding to it (the run that continues and is logged).
  struct PendingReplay {
    int64_t first_step = 0;
    std::vector<double> first_run;
    std::vector<double> second_run;
  };
  std::optional<PendingReplay> replay;
};

// Everything a step reads or changes: what a checkpoint holds, plus the RNG and data cursor.
struct Trainer::Snapshot {
  torch::Tensor params;  // FlatAdamW's flat parameter buffer
  FlatAdamW::State optimizer;
  std::optional<DynamicLossScaler> scaler;
  RngSnapshot rng;
  int64_t step = 0;
  int64_t micro_batches = 0;
};

std::shared_ptr<Trainer::Diagnostics> Trainer::make_inert_diagnostics() { return std::make_shared<Diagnostics>(); }

void Trainer::attach_diagnostics(TrainerDiagnostics wiring) {
  diag_->wiring = std::move(wiring);
  diag_->checks = diag_->wiring.findings != nullptr && ctx_.diag.enabled;
  if (!diag_->checks || ctx_.diag.gemm_canary_interval <= 0) return;
  auto shapes = model_gemm_shapes(ctx_.cfg);
  // Each known-issue shape costs ~27 GFLOP of float64 reference on the host: GPU runs only.
  if (ctx_.device.type() != torch::kCPU)
    for (auto& shape : known_issue_gemm_shapes()) shapes.push_back(std::move(shape));
  diag_->canary.emplace(std::move(shapes), ctx_.device);
}

void Trainer::enter_phase(const char* phase, int64_t step, std::string last_collective) {
  if (diag_->wiring.watchdog) diag_->wiring.watchdog->set_phase(phase, step, std::move(last_collective));
}

const FaultSpec* Trainer::active_fault(FaultKind kind, int64_t step) const {
  const FaultPlan* faults = diag_->wiring.faults;
  return faults && faults->requested(kind) ? faults->active(kind, step, sync_->rank()) : nullptr;
}

bool Trainer::fault(FaultKind kind, int64_t step) const { return active_fault(kind, step) != nullptr; }

bool Trainer::checking() const { return diag_->checks && !diag_->replaying; }

bool Trainer::replaying() const { return diag_->replaying; }

void Trainer::report(std::optional<Finding> finding) {
  if (!finding) return;
  if (diag_->reported[finding->signature]++ >= kMaxFindingsPerSignature) return;
  diag_->wiring.findings->add(std::move(*finding));
}

torch::Tensor Trainer::forward_loss(const Batch& batch, int64_t step, bool first_micro_batch,
                                    std::vector<torch::Tensor>* block_outputs) {
  if (first_micro_batch && fault(FaultKind::hang, step)) hang_forever();
  std::optional<NanInFirstBlock> nan;
  if (first_micro_batch && fault(FaultKind::nan, step)) nan.emplace(model_);
  auto logits = model_->forward(batch.inputs, block_outputs);
  if (fault(FaultKind::loss_spike, step)) logits = logits * kLossSpikeLogitScale;
  return lm_loss(logits, batch.targets);
}

void Trainer::inject_after_grad_sync(int64_t step) {
  if (fault(FaultKind::grad_bitflip, step)) flip_exponent_bit(optimizer_->parameters().front().grad());
}

void Trainer::inject_slow_step(int64_t step, double elapsed_s) {
  const FaultSpec* slow = active_fault(FaultKind::slow_step, step);
  if (!slow) return;
  // Without SECONDS the step takes 3x its own time on any hardware: a performance cliff.
  std::this_thread::sleep_for(std::chrono::duration<double>(slow->seconds > 0 ? slow->seconds : 2.0 * elapsed_s));
}

void Trainer::inject_memory_leak(int64_t step) {
  const FaultSpec* leak = active_fault(FaultKind::memory_leak, step);
  if (!leak) return;
  // Filled, so the pages are really committed (RSS on CPU, allocated bytes on a GPU).
  diag_->leaked.push_back(
      torch::empty({leak->bytes_per_step}, torch::TensorOptions().dtype(torch::kUInt8).device(ctx_.device)).fill_(1));
}

void Trainer::diagnose_nonfinite_loss(const torch::Tensor& loss_sum, int64_t step, int64_t first_micro_batch) {
  // The optimizer step would spread a NaN into every weight, after which no re-run can say
  // where it came from: so this is decided now, the one host read per step the loop makes
  // while checks are on (none once the first non-finite loss has been diagnosed).
  if (!checking() || diag_->nonfinite_diagnosed || loss_sum.isfinite().item<bool>()) return;
  diag_->nonfinite_diagnosed = true;
  const auto& cfg = ctx_.cfg;
  const RngSnapshot rng = capture_rng(ctx_.device);  // re-runs draw the same dropout masks
  NonFiniteDiagnosis diagnosis;
  int64_t micro = 0;
  for (; micro < cfg.grad_accum_steps; ++micro) {
    const Batch batch = data_->train_batch(first_micro_batch + micro);
    const auto rerun = [&](bool fp32) {
      torch::NoGradGuard no_grad;
      restore_rng(rng, ctx_.device);
      AutocastGuard autocast(ctx_.device.type(), fp32 ? AutocastState{} : autocast_);
      std::vector<torch::Tensor> outputs;
      const auto loss = forward_loss(batch, step, micro == 0, &outputs);
      auto named = name_block_outputs(outputs);
      named.push_back({"loss", loss});
      return named;
    };
    diagnosis = diagnose_nonfinite(rerun, cfg.mixed_precision != "fp32");
    if (diagnosis.classification != "not_reproduced") break;
  }
  restore_rng(rng, ctx_.device);
  Finding finding = to_finding(diagnosis, cfg.mixed_precision, step, sync_->rank());
  finding.evidence["micro_batch"] = std::min(micro, cfg.grad_accum_steps - 1);
  report(std::move(finding));
}

void Trainer::gemm_canary_check(int64_t step) {
  const int64_t interval = ctx_.diag.gemm_canary_interval;
  if (!checking() || !diag_->canary || interval <= 0 || step % interval != 0) return;
  enter_phase(phase::canary, step);
  diag_->canary->run(step, sync_->rank(), *diag_->wiring.findings, fault(FaultKind::gemm_corrupt, step));
}

Trainer::Snapshot Trainer::snapshot() {
  torch::NoGradGuard no_grad;
  Snapshot snap;
  snap.params = optimizer_->flat_params().clone();
  snap.optimizer = optimizer_->state();
  snap.scaler = scaler_;
  snap.rng = capture_rng(ctx_.device);
  snap.step = step_;
  snap.micro_batches = micro_batches_;
  return snap;
}

// A reload as a checkpoint loader does it: parameters copied into (load_state_dict), the
// optimizer state copied back into its buffers (Optimizer::load). `snap` is freed on return.
void Trainer::restore(Snapshot snap) {
  torch::NoGradGuard no_grad;
  optimizer_->flat_params().copy_(snap.params);
  optimizer_->load_state(snap.optimizer);
  scaler_ = snap.scaler;
  restore_rng(snap.rng, ctx_.device);
  step_ = snap.step;
  micro_batches_ = snap.micro_batches;
}

// rng mode: rewind-and-replay. After step S the state is saved, steps S+1..S+k run unpublished,
// the state is reloaded and the same steps run again, for real: the two loss sequences must
// match (bitwise under deterministic algorithms). Training continues from the second run, so
// a healthy run logs the losses it would have logged without the check. Also here: the RNG
// restore check, the cross-rank dropout-mask check and memory back to its level after the reload.
void Trainer::replay_check(int64_t step) {
  const auto& cfg = ctx_.cfg;
  if (!checking() || cfg.replay_check_interval <= 0 || step % cfg.replay_check_interval != 0 ||
      step + cfg.replay_steps > cfg.steps || diag_->replay)
    return;
  enter_phase(phase::replay, step);
  const auto& device = ctx_.device;
  const int rank = sync_->rank();
  const bool skew = fault(FaultKind::rng_skew, step);
  report(check_rng_restore(device, step, rank, skew));
  if (diag_->wiring.all_gather)
    report(check_shared_seed_masks(device, cfg.seed, step, rank, skew, diag_->wiring.all_gather));

  const MemorySample before_save = sample_memory(device);
  Snapshot saved = snapshot();
  Diagnostics::PendingReplay replay;
  replay.first_step = step + 1;
  diag_->replaying = true;
  for (int64_t i = 0; i < cfg.replay_steps; ++i) replay.first_run.push_back(run_unpublished_step());
  diag_->replaying = false;
  restore(std::move(saved));
  if (skew) skew_rng(device, rank);  // the reload restored a stale generator state
  report(check_memory_after_reload(before_save, sample_memory(device), ctx_.diag, step, rank));
  diag_->replay = std::move(replay);
}

void Trainer::record_replayed_loss(int64_t step, double local_loss) {
  auto& pending = diag_->replay;
  if (!pending || step < pending->first_step) return;
  pending->second_run.push_back(local_loss);
  if (pending->second_run.size() < pending->first_run.size()) return;
  const bool bitwise = ctx_.cfg.deterministic;
  auto mismatch = compare_replay(pending->first_run, pending->second_run, pending->first_step, bitwise,
                                 ctx_.diag.replay_rel_tolerance, sync_->rank());
  if (!mismatch)
    spdlog::info("replay check: steps {}..{} reproduced {}", pending->first_step, step,
                 bitwise ? "bitwise" : fmt::format("within {:g}", ctx_.diag.replay_rel_tolerance));
  report(std::move(mismatch));
  pending.reset();
}

}  // namespace rcl
