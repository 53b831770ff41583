#include "rocm_conformance_llm/workload/memory_ballast.hpp"

#include <spdlog/spdlog.h>

namespace rcl {

MemoryBallast::MemoryBallast(int64_t bytes, const torch::Device& device) {
  if (bytes <= 0) return;
  held_ = torch::zeros({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
  spdlog::info("memory pressure: holding {} MiB of ballast on {}", bytes >> 20, device.str());
}

}  // namespace rcl
