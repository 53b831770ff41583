// Whether this libtorch multiplies fp16 on the CPU (2.x does; 1.13 raises "not implemented for
// 'Half'"), for the fp16 tests that run on CPU.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace rcl::testing {

inline bool cpu_has_fp16_matmul() {
  try {
    torch::mm(torch::ones({2, 2}, torch::kHalf), torch::ones({2, 2}, torch::kHalf));
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

}  // namespace rcl::testing

#define RCL_REQUIRE_FP16_MATMUL() \
  if (!rcl::testing::cpu_has_fp16_matmul()) GTEST_SKIP() << "this libtorch has no fp16 matmul on the CPU (1.13)"
