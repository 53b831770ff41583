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
// hipDeviceGetName of device `index` ("AMD Instinct MI300X"), when libamdhip64 loads and answers.
std::optional<std::string> hip_device_name(int index);
// hipDeviceGetPCIBusId of device `index` ("0000:c1:00.0"), when libamdhip64 loads and answers.
std::optional<std::string> hip_device_pci_bus_id(int index);
// HIP runtime and driver versions and the device count when available.
nlohmann::json hip_runtime_report();

// The SMI libraries, each opened and initialised once per process. rsmi_init's and amdsmi_init's
// own stderr chatter ("Failed to open drm root directory /sys/class/drm" on a machine without
// amdgpu) goes to the debug log instead of the console.
struct SmiStatus {
  bool available = false;
  std::string library;  // what was loaded, or tried
  std::string reason;   // why not, when unavailable
};
// ROCm SMI: librocm_smi64, or the library named by $RCL_ROCM_SMI_LIBRARY (a non-standard install,
// or the tests' fake).
const SmiStatus& rocm_smi_status();
// Devices SMI monitors now; nullopt when SMI is unavailable or the query fails.
std::optional<uint32_t> rocm_smi_device_count();
// One device's telemetry: temperature_{edge,junction,memory}_c, power_w, power_cap_w,
// gfx_clock_mhz, mem_clock_mhz, vram_used_bytes, vram_total_bytes, busy_percent,
// ecc_correctable, ecc_uncorrectable, pcie_replay_count, throttle_status; a key is absent when the
// library or device does not report it. "responding" is false when no query answered.
nlohmann::json rocm_smi_sample(uint32_t index);
// amd-smi (ROCm >= 6.0): libamd_smi, or $RCL_AMD_SMI_LIBRARY; the same keys (throttle_status is
// built from amd-smi's violation flags: docs/telemetry.md). Device indices count the GPUs of every
// socket in order, as of the last amd_smi_device_count().
const SmiStatus& amd_smi_status();
std::optional<uint32_t> amd_smi_device_count();
nlohmann::json amd_smi_sample(uint32_t index);

// One SMI library as telemetry uses it.
struct SmiLibrary {
  const char* interface;  // "amd-smi" | "rocm-smi"
  const SmiStatus& (*status)();
  std::optional<uint32_t> (*device_count)();
  nlohmann::json (*sample)(uint32_t index);
};
extern const SmiLibrary kAmdSmi, kRocmSmi;
// amd-smi where it loads and initialises (AMD's successor to ROCm SMI, which it deprecates), else
// ROCm SMI (ROCm 5.x, or an install without amd-smi).
const SmiLibrary& telemetry_smi();
// {"available", "library", "reason"?, "devices": [sample...]} for the environment report.
nlohmann::json smi_report(const SmiLibrary& smi);

}  // namespace rcl
