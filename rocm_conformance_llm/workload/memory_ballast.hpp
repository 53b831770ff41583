// The memory stress's ballast (training.memory_pressure_bytes): device memory held for the whole
// run, so the ROCr allocator serves every step from what is left.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace rcl {

class MemoryBallast {
 public:
  // Allocates `bytes` on `device` (and says so); nothing for 0. Throws as the allocator does
  // when the device cannot hold it.
  MemoryBallast(int64_t bytes, const torch::Device& device);

 private:
  torch::Tensor held_;
};

}  // namespace rcl
