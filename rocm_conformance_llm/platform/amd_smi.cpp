// amd-smi telemetry (libamd_smi, ROCm >= 6.0), read through dlopen against the project's own
// declarations (amd_smi_api.hpp): no ROCm header needed, unlike rocm_dlopen.cpp's HIP and ROCm SMI.
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <vector>

#include "rocm_conformance_llm/platform/amd_smi_api.hpp"
#include "rocm_conformance_llm/platform/dlopen_support.hpp"

namespace rcl {

namespace {

using dlopen_support::open_smi_library;
using dlopen_support::symbol;

// amd-smi: processors are found per socket; the list is taken again at each device count (the
// sampler asks for it once per round) and the samples of that round index into it.
struct AmdSmi {
  SmiStatus status;
  bool power_layout_v25 = true;
  amdsmi::GetSocketHandles sockets = nullptr;
  amdsmi::GetProcessorHandles processors = nullptr;
  amdsmi::GetTempMetric temperature = nullptr;
  amdsmi::GetPowerInfo power = nullptr;
  amdsmi::GetPowerCapInfo power_cap = nullptr;
  amdsmi::GetClockInfo clock = nullptr;
  amdsmi::GetMemory memory_usage = nullptr, memory_total = nullptr;
  amdsmi::GetActivity activity = nullptr;
  amdsmi::GetTotalEccCount ecc = nullptr;
  amdsmi::GetPciReplayCounter pci_replay = nullptr;
  amdsmi::GetViolationStatus violations = nullptr;
  std::mutex mutex;  // handles
  std::vector<amdsmi::Handle> handles;
};

AmdSmi& amd_smi() {
  static AmdSmi* instance = [] {
    auto* a = new AmdSmi;  // never destroyed: the sampler thread may outlive static destruction
    void* lib = open_smi_library(
        a->status, "RCL_AMD_SMI_LIBRARY", {"libamd_smi.so", "libamd_smi.so.26", "libamd_smi.so.25", "libamd_smi.so.24"},
        [](void* handle) {
          auto init = symbol<amdsmi::Init>(handle, "amdsmi_init");
          return init && init(amdsmi::kInitAmdGpus) == amdsmi::kSuccess ? "" : "amdsmi_init failed (no amdgpu driver?)";
        });
    if (!lib) return a;
    if (auto version = symbol<amdsmi::GetLibVersion>(lib, "amdsmi_get_lib_version")) {
      alignas(8) unsigned char buffer[256] = {};
      if (version(reinterpret_cast<amdsmi::VersionHead*>(buffer)) == amdsmi::kSuccess)
        a->power_layout_v25 = reinterpret_cast<amdsmi::VersionHead*>(buffer)->first >= amdsmi::kFirstNewLayoutMajor;
    }
    a->sockets = symbol<amdsmi::GetSocketHandles>(lib, "amdsmi_get_socket_handles");
    a->processors = symbol<amdsmi::GetProcessorHandles>(lib, "amdsmi_get_processor_handles");
    a->temperature = symbol<amdsmi::GetTempMetric>(lib, "amdsmi_get_temp_metric");
    a->power = symbol<amdsmi::GetPowerInfo>(lib, "amdsmi_get_power_info");
    a->power_cap = symbol<amdsmi::GetPowerCapInfo>(lib, "amdsmi_get_power_cap_info");
    a->clock = symbol<amdsmi::GetClockInfo>(lib, "amdsmi_get_clock_info");
    a->memory_usage = symbol<amdsmi::GetMemory>(lib, "amdsmi_get_gpu_memory_usage");
    a->memory_total = symbol<amdsmi::GetMemory>(lib, "amdsmi_get_gpu_memory_total");
    a->activity = symbol<amdsmi::GetActivity>(lib, "amdsmi_get_gpu_activity");
    a->ecc = symbol<amdsmi::GetTotalEccCount>(lib, "amdsmi_get_gpu_total_ecc_count");
    a->pci_replay = symbol<amdsmi::GetPciReplayCounter>(lib, "amdsmi_get_gpu_pci_replay_counter");
    a->violations = symbol<amdsmi::GetViolationStatus>(lib, "amdsmi_get_violation_status");
    return a;
  }();
  return *instance;
}

// Calls `fn(buffer)` on a zeroed buffer far larger than any version's struct; nullptr on failure.
template <typename T, typename Fn>
const T* amd_smi_read(Fn&& fn) {
  alignas(8) static thread_local unsigned char buffer[4096];
  std::fill(std::begin(buffer), std::end(buffer), 0);
  return fn(reinterpret_cast<T*>(buffer)) == amdsmi::kSuccess ? reinterpret_cast<const T*>(buffer) : nullptr;
}

// A power figure in W, or nullopt where the library marks it unsupported (0xFFFF, UINT32_MAX) or 0.
std::optional<double> watts(uint32_t value) {
  if (value == 0 || value == 0xFFFF || value == UINT32_MAX) return std::nullopt;
  return static_cast<double>(value);
}

// MI300 reports current_socket_power, Navi and MI200 average_socket_power; `Info` is the layout.
template <typename Info>
std::optional<double> socket_watts(const AmdSmi& a, amdsmi::Handle h) {
  const auto* p = amd_smi_read<Info>([&](void* b) { return a.power(h, b); });
  if (!p) return std::nullopt;
  return watts(p->current_socket_power) ? watts(p->current_socket_power) : watts(p->average_socket_power);
}

}  // namespace

const SmiStatus& amd_smi_status() { return amd_smi().status; }

std::optional<uint32_t> amd_smi_device_count() {
  AmdSmi& a = amd_smi();
  if (!a.status.available || !a.sockets || !a.processors) return std::nullopt;
  uint32_t socket_count = 0;
  if (a.sockets(&socket_count, nullptr) != amdsmi::kSuccess) return std::nullopt;
  std::vector<amdsmi::Handle> sockets(socket_count), found;
  if (socket_count > 0 && a.sockets(&socket_count, sockets.data()) != amdsmi::kSuccess) return std::nullopt;
  for (uint32_t s = 0; s < socket_count; ++s) {
    uint32_t n = 0;
    if (a.processors(sockets[s], &n, nullptr) != amdsmi::kSuccess) return std::nullopt;
    std::vector<amdsmi::Handle> here(n);
    if (n > 0 && a.processors(sockets[s], &n, here.data()) != amdsmi::kSuccess) return std::nullopt;
    found.insert(found.end(), here.begin(), here.begin() + n);
  }
  std::lock_guard<std::mutex> lock(a.mutex);
  a.handles = found;
  return static_cast<uint32_t>(found.size());
}

nlohmann::json amd_smi_sample(uint32_t index) {
  nlohmann::json dev = {{"index", index}};
  bool any = false;
  const auto put = [&](const char* key, auto value) {
    dev[key] = value;
    any = true;
  };
  AmdSmi& a = amd_smi();
  amdsmi::Handle h = nullptr;
  {
    std::lock_guard<std::mutex> lock(a.mutex);
    if (index < a.handles.size()) h = a.handles[index];
  }
  if (h && a.status.available) {
    const std::pair<const char*, uint32_t> sensors[] = {{"temperature_edge_c", amdsmi::kTempEdge},
                                                        {"temperature_junction_c", amdsmi::kTempHotspot},
                                                        {"temperature_memory_c", amdsmi::kTempVram}};
    for (const auto& [key, sensor] : sensors) {
      int64_t degrees = 0;
      if (a.temperature && a.temperature(h, sensor, amdsmi::kTempCurrent, &degrees) == amdsmi::kSuccess)
        put(key, static_cast<double>(degrees));
    }
    if (a.power)
      if (const auto w =
              a.power_layout_v25 ? socket_watts<amdsmi::PowerInfoV25>(a, h) : socket_watts<amdsmi::PowerInfoV24>(a, h))
        put("power_w", *w);
    if (a.power_cap)
      if (const auto* p = amd_smi_read<amdsmi::PowerCapInfo>([&](auto* b) { return a.power_cap(h, 0, b); }))
        put("power_cap_w", p->power_cap / 1e6);
    const std::pair<const char*, uint32_t> clocks[] = {{"gfx_clock_mhz", amdsmi::kClkGfx},
                                                       {"mem_clock_mhz", amdsmi::kClkMem}};
    for (const auto& clock : clocks)
      if (a.clock)
        if (const auto* c = amd_smi_read<amdsmi::ClkInfo>([&](auto* b) { return a.clock(h, clock.second, b); }))
          put(clock.first, c->clk);
    uint64_t bytes = 0, replays = 0;
    if (a.memory_usage && a.memory_usage(h, amdsmi::kMemVram, &bytes) == amdsmi::kSuccess)
      put("vram_used_bytes", bytes);
    if (a.memory_total && a.memory_total(h, amdsmi::kMemVram, &bytes) == amdsmi::kSuccess)
      put("vram_total_bytes", bytes);
    if (a.activity)
      if (const auto* u = amd_smi_read<amdsmi::EngineUsage>([&](auto* b) { return a.activity(h, b); }))
        put("busy_percent", u->gfx_activity);
    if (a.ecc)
      if (const auto* e = amd_smi_read<amdsmi::ErrorCount>([&](auto* b) { return a.ecc(h, b); })) {
        put("ecc_correctable", e->correctable_count);
        put("ecc_uncorrectable", e->uncorrectable_count);
      }
    if (a.pci_replay && a.pci_replay(h, &replays) == amdsmi::kSuccess) put("pcie_replay_count", replays);
    // amd-smi has no SMU throttle word; the violation flags become bits of throttle_status:
    // 1 processor hot, 2 package power (PPT), 4 socket thermal, 8 voltage regulator, 16 HBM thermal.
    if (a.violations)
      if (const auto* v = amd_smi_read<amdsmi::ViolationStatus>([&](auto* b) { return a.violations(h, b); })) {
        const uint8_t flags[] = {v->active_prochot_thrm, v->active_ppt_pwr, v->active_socket_thrm, v->active_vr_thrm,
                                 v->active_hbm_thrm};
        uint32_t status = 0;
        for (size_t bit = 0; bit < std::size(flags); ++bit)
          if (flags[bit] == 1) status |= 1u << bit;
        put("throttle_status", status);
      }
  }
  dev["responding"] = any;
  return dev;
}

}  // namespace rcl
