// The few amd-smi (libamd_smi, ROCm >= 6.0) entry points and structs telemetry reads, declared
// here because Debian ships no amd-smi header and the library is only ever dlopen'ed. Names,
// signatures, enum values and layouts follow ROCm/amdsmi's include/amd_smi/amdsmi.h. The
// tests' fake library (tests/fakes/fake_amd_smi.cpp) implements these same declarations.
//
// Two structs changed between library generations (amd-smi 24.x of ROCm 6.0-6.3 vs 25.x+ of
// ROCm 6.4 and later): amdsmi_version_t lost its leading `year`, and amdsmi_power_info_t gained a
// leading uint64_t `socket_power`. The first uint32_t of amdsmi_version_t is therefore the year
// (<= 24) on the old layout and the major version (>= 25) on the new one: that one number picks
// the power layout. Every call writes into a zeroed buffer far larger than the struct, so a
// newer library appending fields stays inside it.
#pragma once

#include <cstdint>

namespace rcl::amdsmi {

using Status = uint32_t;  // amdsmi_status_t
constexpr Status kSuccess = 0;
constexpr Status kNotSupported = 2;
constexpr Status kInvalidArgs = 1;
constexpr uint64_t kInitAmdGpus = 1u << 1;  // AMDSMI_INIT_AMD_GPUS
using Handle = void*;                       // amdsmi_socket_handle, amdsmi_processor_handle

// amdsmi_temperature_type_t, amdsmi_temperature_metric_t, amdsmi_memory_type_t, amdsmi_clk_type_t
enum TemperatureType : uint32_t { kTempEdge = 0, kTempHotspot = 1, kTempVram = 2 };
constexpr uint32_t kTempCurrent = 0;
constexpr uint32_t kMemVram = 0;
enum ClockType : uint32_t { kClkGfx = 0, kClkMem = 4 };

// amdsmi_version_t, first field: year (24.x) or major (25.x and later).
struct VersionHead {
  uint32_t first, second, third, fourth;
};
constexpr uint32_t kFirstNewLayoutMajor = 25;
// amdsmi_power_info_t, 24.x / 25.x+ (powers in W; unsupported members are 0xFFFF or UINT32_MAX).
struct PowerInfoV24 {
  uint32_t current_socket_power, average_socket_power, gfx_voltage, soc_voltage, mem_voltage, power_limit;
};
struct PowerInfoV25 {
  uint64_t socket_power;
  uint32_t current_socket_power, average_socket_power;
  uint64_t gfx_voltage, soc_voltage, mem_voltage;
  uint32_t power_limit;
};
struct PowerCapInfo {  // amdsmi_power_cap_info_t, microwatts
  uint64_t power_cap, default_power_cap, dpm_cap, min_power_cap, max_power_cap;
};
struct ClkInfo {  // amdsmi_clk_info_t, MHz
  uint32_t clk, min_clk, max_clk;
  uint8_t clk_locked, clk_deep_sleep;
};
struct EngineUsage {  // amdsmi_engine_usage_t, percent
  uint32_t gfx_activity, umc_activity, mm_activity;
};
struct ErrorCount {  // amdsmi_error_count_t
  uint64_t correctable_count, uncorrectable_count, deferred_count;
};
// amdsmi_violation_status_t (ROCm 6.4+): the active_* flags say a limit is throttling now
// (1 active, 0 not, 0xFF unsupported).
struct ViolationStatus {
  uint64_t reference_timestamp, violation_timestamp, acc_counter, acc_prochot_thrm, acc_ppt_pwr, acc_socket_thrm,
      acc_vr_thrm, acc_hbm_thrm, per_prochot_thrm, per_ppt_pwr, per_socket_thrm, per_vr_thrm, per_hbm_thrm;
  uint8_t active_prochot_thrm, active_ppt_pwr, active_socket_thrm, active_vr_thrm, active_hbm_thrm;
};

// The calls, as function pointer types for dlsym.
using Init = Status (*)(uint64_t);
using GetLibVersion = Status (*)(VersionHead*);
using GetSocketHandles = Status (*)(uint32_t*, Handle*);
using GetProcessorHandles = Status (*)(Handle, uint32_t*, Handle*);
using GetTempMetric = Status (*)(Handle, uint32_t, uint32_t, int64_t*);  // degrees C
using GetPowerInfo = Status (*)(Handle, void*);
using GetPowerCapInfo = Status (*)(Handle, uint32_t, PowerCapInfo*);
using GetClockInfo = Status (*)(Handle, uint32_t, ClkInfo*);
using GetMemory = Status (*)(Handle, uint32_t, uint64_t*);  // bytes
using GetActivity = Status (*)(Handle, EngineUsage*);
using GetTotalEccCount = Status (*)(Handle, ErrorCount*);
using GetPciReplayCounter = Status (*)(Handle, uint64_t*);
using GetViolationStatus = Status (*)(Handle, ViolationStatus*);

}  // namespace rcl::amdsmi
