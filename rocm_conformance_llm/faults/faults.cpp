#include "rocm_conformance_llm/faults/faults.hpp"

#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "rocm_conformance_llm/workload/gemm_checks.hpp"

namespace rcl {

namespace {

// loss-spike: logits this many times larger make the model confidently wrong for one step.
constexpr double kLossSpikeLogitScale = 20.0;
// grad-bitflip: the top exponent bit of a float32 (multiplies a value below 2 by 2^128).
constexpr int32_t kFloatExponentTopBit = 1 << 30;

// hang: the rank stops making progress, as after a lost completion signal (rocm-systems#7896).
// Only the watchdog thread can end the run now.
[[noreturn]] void hang_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// grad-bitflip: flips the top exponent bit of the largest-magnitude element below 2, a flipped
// bit in a reduction buffer or in memory. The value grows by 2^128; it stays finite or becomes
// Inf depending on the device's norm accumulation. Device-side: no host read.
void flip_exponent_bit(const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(grad.scalar_type() == torch::kFloat, "grad-bitflip: float32 gradients expected");
  const auto flat = grad.view(-1);
  const auto magnitude = flat.abs();
  const auto index = torch::where(magnitude < 2.0, magnitude, torch::zeros_like(magnitude)).argmax();
  auto bits = flat.view(torch::kInt);
  bits.index_put_({index}, bits.index({index}).bitwise_xor(kFloatExponentTopBit));
}

// nan: the weight that block 0's FFN down projection reads as NaN for one forward, so the block
// writes NaN from finite inputs, as a GEMM that left its output unwritten does
// (rocm-libraries#9055). Written through .data(): autograd's version counter must not see it,
// so backward still runs (and spreads the NaN, as the real failure would).
torch::Tensor nan_target(GPT& model) { return model->blocks().front()->mlp->down->weight.data()[0][0]; }

// logits-nan[-once]: the LM head's GEMM writes one NaN element, the silent corruption of one
// output (rocm-libraries#9055 returns NaN from a bf16 GEMM). Added, so autograd carries it on.
torch::Tensor with_one_nan(const torch::Tensor& logits) {
  auto bad = torch::zeros_like(logits);
  bad.view(-1)[0].fill_(std::numeric_limits<float>::quiet_NaN());
  return logits + bad;
}

}  // namespace

FaultInjector::FaultInjector(const FaultPlan& plan, int rank, GPT model, torch::Device device)
    : plan_(plan), rank_(rank), model_(std::move(model)), device_(device) {}

const FaultSpec* FaultInjector::active(FaultKind kind, int64_t step) const {
  return plan_.requested(kind) ? plan_.active(kind, step, rank_) : nullptr;
}

void FaultInjector::on_phase(const char* phase, int64_t step, const std::vector<CollectiveSample>& /*collectives*/) {
  plan_.stop_rank_if_planned(phase, step, rank_);
}

void FaultInjector::before_forward(int64_t step, bool first) {
  if (!first) return;
  if (active(FaultKind::hang, step)) hang_forever();
  // gemm-output-corrupt: the step's first model GEMM (block 0's Q/K/V projection) stores one
  // wrong element, silent data corruption inside a rocBLAS/hipBLASLt kernel.
  if (active(FaultKind::gemm_output_corrupt, step)) corrupt_next_gemm(GemmPass::forward);
  if (active(FaultKind::nan, step)) {
    auto weight = nan_target(model_);
    nan_saved_ = weight.clone();
    weight.fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

torch::Tensor FaultInjector::on_logits(torch::Tensor logits, int64_t step) {
  if (nan_saved_.defined()) {  // the NaN lasted for one forward
    nan_target(model_).copy_(nan_saved_);
    nan_saved_ = torch::Tensor();
  }
  // -once: the first forward of its step only, as a transient fault strikes; a re-run is clean.
  const bool once = active(FaultKind::logits_nan_once, step) && !logits_nan_once_struck_;
  logits_nan_once_struck_ = logits_nan_once_struck_ || once;
  if (once || active(FaultKind::logits_nan, step)) logits = with_one_nan(logits);
  return active(FaultKind::loss_spike, step) ? logits * kLossSpikeLogitScale : logits;
}

void FaultInjector::on_gradients(int64_t step, const std::vector<torch::Tensor>& params,
                                 const torch::Tensor& /*loss_sum*/, int64_t /*first_micro_batch*/) {
  if (active(FaultKind::grad_bitflip, step)) flip_exponent_bit(params.front().grad());
}

void FaultInjector::before_step_time(StepRecord& rec, double elapsed_s) {
  if (const FaultSpec* leak = active(FaultKind::memory_leak, rec.step)) {
    // Filled, so the pages are really committed (RSS on CPU, allocated bytes on a GPU) before
    // the step's memory is sampled.
    leaked_.push_back(
        torch::empty({leak->bytes_per_step}, torch::TensorOptions().dtype(torch::kUInt8).device(device_)).fill_(1));
  }
  if (const FaultSpec* slow = active(FaultKind::slow_step, rec.step)) {
    // Without SECONDS the step takes 3x its own time on any hardware: a performance cliff.
    std::this_thread::sleep_for(std::chrono::duration<double>(slow->seconds > 0 ? slow->seconds : 2.0 * elapsed_s));
  }
  const FaultSpec* late = active(FaultKind::slow_collective, rec.step);
  if (!late || rec.collectives.empty()) return;
  // The step waits for the all-reduce's completion: its time, and the collective's, grow by it.
  const double delay_s = late->seconds > 0 ? late->seconds : 10.0 * elapsed_s;
  std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  // Timed on the device's stream (RCCL on 2.x), the collective's settle keeps this addition.
  rec.collectives.back().seconds += delay_s;
}

}  // namespace rcl
