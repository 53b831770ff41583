// Device scalars on their way to the host without a device-wide wait: the trainer's loss and
// gradient norm, the shadow check's verdict.
#pragma once

#include <optional>
#include <vector>

#include <c10/core/Event.h>
#include <torch/torch.h>

namespace rcl {

// The stream libtorch queues work on for `device` (the HIP stream on ROCm).
c10::Stream current_stream(const torch::Device& device);

// The copy is queued behind the kernels so far into pinned memory and read later (one step
// later, in practice), by which time it has landed: an ordinary step never drains the GPU
// queue. On CPU the copy is immediate.
class DeferredScalars {
 public:
  explicit DeferredScalars(const std::vector<torch::Tensor>& scalars);
  // Waits for the copy (it has almost always landed by then).
  std::vector<double> get() const;

 private:
  torch::Tensor host_;
  std::optional<c10::Event> ready_;
};

}  // namespace rcl
