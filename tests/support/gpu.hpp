// Tests that need a GPU run where libtorch sees one (torch::kCUDA is the HIP device on ROCm)
// and are skipped, saying so, everywhere else.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rocm_conformance_llm/platform/device.hpp"

#define RCL_REQUIRE_GPU() \
  if (!::rcl::gpu_available()) GTEST_SKIP() << "needs a GPU (libtorch sees none here)"

namespace rcl::testing {
inline const torch::Device kGpu(torch::kCUDA, 0);
}  // namespace rcl::testing
