// GPU facts in-process: the device allocator's statistics, pinned host copies, and deferred
// reads that queue no blocking read. They run where libtorch sees a GPU (torch::kCUDA is the HIP
// device on ROCm) and skip, saying so, elsewhere; scripts/gpu/run.sh runs them on the GPU
// machine. Through the binary: tests/binary/test_gpu.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "support/cli_runner.hpp"
#include "support/gpu.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using nlohmann::json;
using rcl::testing::kGpu;

// The device's own allocator statistics, not the process RSS, and they follow an allocation.
TEST(GpuMemory, StatisticsFollowAnAllocation) {
  RCL_REQUIRE_GPU();
  constexpr int64_t kBytes = 64 << 20;
  const auto before = sample_memory(kGpu);
  ASSERT_NE(before.source, "rss");
  ASSERT_GE(before.allocated_bytes, 0);
  auto held = torch::empty({kBytes}, torch::TensorOptions().dtype(torch::kByte).device(kGpu));
  const auto during = sample_memory(kGpu);
  EXPECT_GE(during.allocated_bytes - before.allocated_bytes, kBytes);
  EXPECT_GE(during.reserved_bytes, during.allocated_bytes);
  EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
  held = torch::Tensor();
  EXPECT_LE(sample_memory(kGpu).allocated_bytes, during.allocated_bytes - kBytes);
}

// Batches are built in pinned host memory and copied without blocking: on the GPU they hold
// exactly the tokens the CPU builds.
TEST(GpuData, PinnedCopiesDeliverTheSameBatches) {
  RCL_REQUIRE_GPU();
  const SyntheticCorpus on_cpu(SyntheticSpec{}, 7, 8, 64, 0, 1, torch::Device(torch::kCPU));
  const SyntheticCorpus on_gpu(SyntheticSpec{}, 7, 8, 64, 0, 1, kGpu);
  for (const int64_t index : {0, 1, 17}) {
    const Batch a = on_cpu.train_batch(index), b = on_gpu.train_batch(index);
    ASSERT_TRUE(b.inputs.is_cuda());
    EXPECT_TRUE(torch::equal(a.inputs, b.inputs.cpu())) << index;
    EXPECT_TRUE(torch::equal(a.targets, b.targets.cpu())) << index;
  }
}

// The loss read of an ordinary step: queuing the copy is no blocking read; the values land.
TEST(GpuDeferredRead, QueuingIsNoBlockingReadAndTheValuesLand) {
  RCL_REQUIRE_GPU();
  const auto a = torch::arange(1000, torch::TensorOptions().dtype(torch::kFloat).device(kGpu));
  std::optional<DeferredScalars> deferred;
  {
    HostReadCounter reads;
    deferred.emplace(std::vector<torch::Tensor>{a.sum(), a.max()});
    EXPECT_EQ(reads.count(), 0);
  }
  const auto values = deferred->get();
  EXPECT_DOUBLE_EQ(values[0], 499500.0);
  EXPECT_DOUBLE_EQ(values[1], 999.0);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
