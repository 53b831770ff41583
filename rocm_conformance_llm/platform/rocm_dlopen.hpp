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
// HIP runtime and driver versions and the device count when available.
nlohmann::json hip_runtime_report();

// ROCm SMI, opened and initialised once per process: librocm_smi64, or the library named by
// $RCL_ROCM_SMI_LIBRARY (a non-standard install, or the tests' fake). rsmi_init's own stderr
// chatter ("Failed to open drm root directory /sys/class/drm" on a machine without amdgpu) goes
// to the debug log instead of the console.
struct SmiStatus {
  bool available = false;
  std::string library;  // what was loaded, or tried
  std::string reason;   // why not, when unavailable
};
const SmiStatus& rocm_smi_status();
// Devices SMI monitors now; nullopt when SMI is unavailable or the query fails.
std::optional<uint32_t> rocm_smi_device_count();
// One device's telemetry: temperature_{edge,junction,memory}_c, power_w, power_cap_w,
// gfx_clock_mhz, mem_clock_mhz, vram_used_bytes, vram_total_bytes, busy_percent,
// ecc_correctable, ecc_uncorrectable, pcie_replay_count, throttle_status; a key is absent when the
// library or device does not report it. "responding" is false when no query answered.
nlohmann::json rocm_smi_sample(uint32_t index);
// {"available", "library", "reason"?, "devices": [rocm_smi_sample...]} for the environment report.
nlohmann::json rocm_smi_report();

}  // namespace rcl
