// Every GEMM of the model's step as it runs, forward and backward, reported to one observer armed
// on the training thread: the checksum check (checks/detectors/gemm_checksums.hpp) judges each
// product against its row and column checksums. A linear of the model (tapped_linear, op_tap.hpp)
// runs through an autograd function of its own while an observer is armed, so the two gradient
// GEMMs of its backward are seen too; the backward may run on another thread (libtorch's device
// threads), so the function keeps the observer it was built under. Idle (no observer), a linear
// is the plain op.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace rcl {

// Which product of a linear y = x W^T + b: the forward's, or the backward's dX = dY W and dW = dY^T X.
enum class GemmPass { forward, grad_input, grad_weight };
const char* gemm_pass_name(GemmPass pass);

// One GEMM as it ran: c = a b (+ bias along c's rows), a [M, K], b [K, N], c [M, N], all 2-D, in
// the dtype the product was computed in (autocast's, where the forward ran under it).
struct GemmCall {
  const char* site = "";  // the linear's place in a block: "attn.qkv", "attn.proj", "mlp.up", "mlp.down", "lm_head"
  int64_t layer = -1;     // its block, -1 outside the blocks (the LM head)
  GemmPass pass = GemmPass::forward;
  torch::Tensor a, b, bias, c;

  // "block1.attn.qkv forward": what a finding names.
  std::string name() const;
};

class GemmObserver {
 public:
  virtual ~GemmObserver() = default;
  // On the thread that runs the GEMM (the backward's may not be the training thread).
  virtual void observe_gemm(const GemmCall& call) = 0;
};

// Arms `observer` on this thread until destroyed; nullptr arms nothing (a replayed block re-arms
// what its forward ran under). One at a time: the innermost wins.
class ObservedGemms {
 public:
  explicit ObservedGemms(GemmObserver* observer);
  ~ObservedGemms();
  ObservedGemms(const ObservedGemms&) = delete;
  ObservedGemms& operator=(const ObservedGemms&) = delete;

 private:
  GemmObserver* previous_;
};
// The observer armed on this thread, or nullptr: what a recomputation must re-arm.
GemmObserver* armed_gemm_observer();

// The block whose linears run in this scope (set by the block's forward, so a recomputed block
// names itself too).
class GemmLayerScope {
 public:
  explicit GemmLayerScope(int64_t layer);
  ~GemmLayerScope();
  GemmLayerScope(const GemmLayerScope&) = delete;
  GemmLayerScope& operator=(const GemmLayerScope&) = delete;

 private:
  int64_t previous_;
};

// y = x W^T + b as nn::functional::linear computes it (autocast's dtype where it is on), with each
// of its GEMMs, forward and backward, reported to the observer armed now. Without one: the plain op.
torch::Tensor observed_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const char* site);

// The fault matrix's model-GEMM fault (faults/): the next observed GEMM of `pass` on this thread has
// one output element made wrong before anyone reads it, as a kernel that stored a wrong value would.
void corrupt_next_gemm(GemmPass pass);

}  // namespace rcl
