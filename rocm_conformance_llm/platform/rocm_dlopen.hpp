// HIP runtime and ROCm SMI facts, read through dlopen so the binary starts (and reports
// "absent") on machines without ROCm. Nothing here is needed for training itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace rcl {

struct HipMemInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// hipMemGetInfo on the current device, when libamdhip64 loads and a device answers.
std::optional<HipMemInfo> hip_mem_info();
// HIP runtime version and device properties (name, gcnArchName) when available.
nlohmann::json hip_runtime_report();
// ROCm SMI: per-device temperature, power, VRAM use and busy percent when librocm_smi64 loads.
nlohmann::json rocm_smi_report();

}  // namespace rcl
