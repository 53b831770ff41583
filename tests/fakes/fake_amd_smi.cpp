// A stand-in for libamd_smi that the telemetry tests load through $RCL_AMD_SMI_LIBRARY, built
// from the project's own declarations (rocm_conformance_llm/platform/amd_smi_api.hpp).
// $FAKE_AMDSMI_SCRIPT names the script (fake_script.hpp); each socket count after the first moves
// to its next line. One socket holds `devices` GPUs. Keys as in fake_rocm_smi.cpp (devices,
// temp_edge, temp_junction, temp_memory, power_w, power_cap_w, gfxclk, uclk, vram_used,
// vram_total, busy, ecc_ce, ecc_ue, replay, fail), plus `throttle` as the violation flags that are
// active (bit 0 processor hot ... bit 4 HBM thermal) and `lib_major` (default 26; 24 serves the
// ROCm 6.0-6.3 struct layouts); defaults in fake_script.hpp. amdsmi_init prints what the real
// library prints without amdgpu.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "fake_script.hpp"
#include "rocm_conformance_llm/platform/amd_smi_api.hpp"

namespace {

using namespace rcl::amdsmi;

fake_smi::Script script;
double value(const char* key) { return script.value(key); }
// Processor handles are 1..devices; the socket handle is a fixed non-null pointer.
int socket_tag = 0;
uint32_t index_of(Handle h) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(h) - 1); }
Status answer(Handle h) { return script.answers(index_of(h)) ? kSuccess : kNotSupported; }
bool old_layout() { return value("lib_major") < kFirstNewLayoutMajor; }

}  // namespace

extern "C" {

Status amdsmi_init(uint64_t flags) {
  script.load("FAKE_AMDSMI_SCRIPT");
  std::fprintf(stderr, "Failed to open drm root directory /sys/class/drm.\n");
  return flags & kInitAmdGpus ? kSuccess : kInvalidArgs;
}

Status amdsmi_get_lib_version(VersionHead* v) {
  const auto major = static_cast<uint32_t>(value("lib_major"));
  *v = old_layout() ? VersionHead{major, 7, 0, 0} : VersionHead{major, 0, 0, 0};
  return kSuccess;
}

Status amdsmi_get_socket_handles(uint32_t* count, Handle* sockets) {
  if (!sockets) script.next_round();
  *count = 1;
  if (sockets) sockets[0] = &socket_tag;
  return kSuccess;
}

Status amdsmi_get_processor_handles(Handle socket, uint32_t* count, Handle* processors) {
  if (socket != &socket_tag) return kInvalidArgs;
  const auto devices = static_cast<uint32_t>(value("devices"));
  if (processors)
    for (uint32_t i = 0; i < std::min(*count, devices); ++i) processors[i] = reinterpret_cast<Handle>(uintptr_t{i + 1});
  *count = devices;
  return kSuccess;
}

Status amdsmi_get_temp_metric(Handle h, uint32_t sensor, uint32_t, int64_t* degrees) {
  const char* key = sensor == kTempEdge ? "temp_edge" : sensor == kTempHotspot ? "temp_junction" : "temp_memory";
  *degrees = static_cast<int64_t>(value(key));
  return answer(h);
}

// MI300-style (current power) on the new layout, Navi/MI200-style (average only) on the old one.
Status amdsmi_get_power_info(Handle h, void* info) {
  const auto watts = static_cast<uint32_t>(value("power_w"));
  if (old_layout()) {
    PowerInfoV24 p{.current_socket_power = 0xFFFF,
                   .average_socket_power = watts,
                   .gfx_voltage = 900,
                   .soc_voltage = 800,
                   .mem_voltage = 1200,
                   .power_limit = 750};
    std::memcpy(info, &p, sizeof p);
  } else {
    PowerInfoV25 p{.socket_power = watts,
                   .current_socket_power = watts,
                   .average_socket_power = UINT32_MAX,
                   .gfx_voltage = 900,
                   .soc_voltage = 800,
                   .mem_voltage = 1200,
                   .power_limit = 750};
    std::memcpy(info, &p, sizeof p);
  }
  return answer(h);
}

Status amdsmi_get_power_cap_info(Handle h, uint32_t, PowerCapInfo* info) {
  info->power_cap = static_cast<uint64_t>(value("power_cap_w") * 1e6);
  return answer(h);
}

Status amdsmi_get_clock_info(Handle h, uint32_t type, ClkInfo* info) {
  info->clk = static_cast<uint32_t>(type == kClkGfx ? value("gfxclk") : value("uclk"));
  return answer(h);
}

Status amdsmi_get_gpu_memory_usage(Handle h, uint32_t, uint64_t* used) {
  *used = static_cast<uint64_t>(value("vram_used"));
  return answer(h);
}

Status amdsmi_get_gpu_memory_total(Handle h, uint32_t, uint64_t* total) {
  *total = static_cast<uint64_t>(value("vram_total"));
  return answer(h);
}

Status amdsmi_get_gpu_activity(Handle h, EngineUsage* usage) {
  usage->gfx_activity = static_cast<uint32_t>(value("busy"));
  return answer(h);
}

Status amdsmi_get_gpu_total_ecc_count(Handle h, ErrorCount* ec) {
  ec->correctable_count = static_cast<uint64_t>(value("ecc_ce"));
  ec->uncorrectable_count = static_cast<uint64_t>(value("ecc_ue"));
  return answer(h);
}

Status amdsmi_get_gpu_pci_replay_counter(Handle h, uint64_t* counter) {
  *counter = static_cast<uint64_t>(value("replay"));
  return answer(h);
}

// Not every ASIC reports every limit: the VR flag is always "unsupported" (0xFF) here.
Status amdsmi_get_violation_status(Handle h, ViolationStatus* v) {
  const auto bits = static_cast<uint32_t>(value("throttle"));
  uint8_t* flags[] = {&v->active_prochot_thrm, &v->active_ppt_pwr, &v->active_socket_thrm, &v->active_vr_thrm,
                      &v->active_hbm_thrm};
  for (uint32_t bit = 0; bit < 5; ++bit) *flags[bit] = (bits >> bit) & 1u;
  v->active_vr_thrm = 0xFF;
  return answer(h);
}

}  // extern "C"
