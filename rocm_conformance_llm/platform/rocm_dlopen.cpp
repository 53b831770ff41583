// HIP runtime and ROCm SMI read through dlopen: the only code that needs their headers, so the
// only file CMakeLists.txt gives them (amd-smi and the shared loading helpers live beside it).
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "rocm_conformance_llm/platform/dlopen_support.hpp"

#ifdef RCL_HAVE_HIP_HEADERS
#include <hip/hip_runtime_api.h>
#endif
#ifdef RCL_HAVE_ROCM_SMI_HEADERS
#include <rocm_smi/rocm_smi.h>
#endif

namespace rcl {
namespace {

using dlopen_support::open_library;
using dlopen_support::open_smi_library;
using dlopen_support::symbol;

#ifdef RCL_HAVE_HIP_HEADERS
void* hip_library() {
  static void* handle = open_library({"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"});
  return handle;
}
#endif

}  // namespace

std::optional<HipMemInfo> hip_mem_info() {
#ifdef RCL_HAVE_HIP_HEADERS
  using MemGetInfo = hipError_t (*)(size_t*, size_t*);
  static auto fn = symbol<MemGetInfo>(hip_library(), "hipMemGetInfo");
  size_t free_bytes = 0, total_bytes = 0;
  if (fn && fn(&free_bytes, &total_bytes) == hipSuccess)
    return HipMemInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
#endif
  return std::nullopt;
}

namespace {
// A HIP query that writes one device's text (char* out, int length, int device):
// hipDeviceGetName, hipDeviceGetPCIBusId.
std::optional<std::string> hip_device_text(const char* function, int index) {
#ifdef RCL_HAVE_HIP_HEADERS
  using DeviceText = hipError_t (*)(char*, int, int);
  const auto fn = symbol<DeviceText>(hip_library(), function);
  char text[256] = {};
  if (fn && fn(text, sizeof text - 1, index) == hipSuccess && text[0] != '\0') return std::string(text);
#else
  (void)function;
  (void)index;
#endif
  return std::nullopt;
}
}  // namespace

std::optional<std::string> hip_device_name(int index) { return hip_device_text("hipDeviceGetName", index); }

std::optional<std::string> hip_device_pci_bus_id(int index) { return hip_device_text("hipDeviceGetPCIBusId", index); }

nlohmann::json hip_runtime_report() {
  nlohmann::json out = {{"available", false}};
#ifdef RCL_HAVE_HIP_HEADERS
  void* lib = hip_library();
  if (!lib) {
    out["reason"] = "libamdhip64 not found";
    return out;
  }
  auto runtime_version = symbol<hipError_t (*)(int*)>(lib, "hipRuntimeGetVersion");
  auto driver_version = symbol<hipError_t (*)(int*)>(lib, "hipDriverGetVersion");
  auto device_count = symbol<hipError_t (*)(int*)>(lib, "hipGetDeviceCount");
  int version = 0, driver = 0, count = 0;
  if (runtime_version && runtime_version(&version) == hipSuccess) out["runtime_version"] = version;
  if (driver_version && driver_version(&driver) == hipSuccess) out["driver_version"] = driver;
  if (!device_count || device_count(&count) != hipSuccess) {
    out["reason"] = "hipGetDeviceCount failed (no usable device)";
    return out;
  }
  out["available"] = count > 0;
  out["device_count"] = count;
#else
  out["reason"] = "built without HIP headers";
#endif
  return out;
}

#ifdef RCL_HAVE_ROCM_SMI_HEADERS
namespace {

// The entry points used; each may be missing from an older or newer library (then its keys are).
struct SmiApi {
  rsmi_status_t (*num_devices)(uint32_t*) = nullptr;
  rsmi_status_t (*temperature)(uint32_t, uint32_t, rsmi_temperature_metric_t, int64_t*) = nullptr;
  rsmi_status_t (*power_ave)(uint32_t, uint32_t, uint64_t*) = nullptr;
  rsmi_status_t (*power_cap)(uint32_t, uint32_t, uint64_t*) = nullptr;
  rsmi_status_t (*memory_usage)(uint32_t, rsmi_memory_type_t, uint64_t*) = nullptr;
  rsmi_status_t (*memory_total)(uint32_t, rsmi_memory_type_t, uint64_t*) = nullptr;
  rsmi_status_t (*busy)(uint32_t, uint32_t*) = nullptr;
  rsmi_status_t (*ecc_count)(uint32_t, rsmi_gpu_block_t, rsmi_error_count_t*) = nullptr;
  rsmi_status_t (*pci_replay)(uint32_t, uint64_t*) = nullptr;
  rsmi_status_t (*gpu_metrics)(uint32_t, rsmi_gpu_metrics_t*) = nullptr;
};

struct Smi {
  SmiStatus status;
  SmiApi api;
};

Smi open_smi() {
  Smi smi;
  void* lib = open_smi_library(
      smi.status, "RCL_ROCM_SMI_LIBRARY",
      {"librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so.1"},
      [](void* handle) {
        auto init = symbol<rsmi_status_t (*)(uint64_t)>(handle, "rsmi_init");
        return init && init(0) == RSMI_STATUS_SUCCESS ? "" : "rsmi_init failed (no amdgpu driver?)";
      });
  if (!smi.status.available) return smi;
  auto& a = smi.api;
  a.num_devices = symbol<decltype(a.num_devices)>(lib, "rsmi_num_monitor_devices");
  a.temperature = symbol<decltype(a.temperature)>(lib, "rsmi_dev_temp_metric_get");
  a.power_ave = symbol<decltype(a.power_ave)>(lib, "rsmi_dev_power_ave_get");
  a.power_cap = symbol<decltype(a.power_cap)>(lib, "rsmi_dev_power_cap_get");
  a.memory_usage = symbol<decltype(a.memory_usage)>(lib, "rsmi_dev_memory_usage_get");
  a.memory_total = symbol<decltype(a.memory_total)>(lib, "rsmi_dev_memory_total_get");
  a.busy = symbol<decltype(a.busy)>(lib, "rsmi_dev_busy_percent_get");
  a.ecc_count = symbol<decltype(a.ecc_count)>(lib, "rsmi_dev_ecc_count_get");
  a.pci_replay = symbol<decltype(a.pci_replay)>(lib, "rsmi_dev_pci_replay_counter_get");
  a.gpu_metrics = symbol<decltype(a.gpu_metrics)>(lib, "rsmi_dev_gpu_metrics_info_get");
  return smi;
}

const Smi& smi() {
  static const Smi instance = open_smi();
  return instance;
}

// The RAS blocks whose ECC counters are summed (UMC is HBM; the rest are on-chip SRAM).
constexpr rsmi_gpu_block_t kEccBlocks[] = {RSMI_GPU_BLOCK_UMC,      RSMI_GPU_BLOCK_SDMA,     RSMI_GPU_BLOCK_GFX,
                                           RSMI_GPU_BLOCK_MMHUB,    RSMI_GPU_BLOCK_PCIE_BIF, RSMI_GPU_BLOCK_HDP,
                                           RSMI_GPU_BLOCK_XGMI_WAFL};

}  // namespace
#endif

const SmiStatus& rocm_smi_status() {
#ifdef RCL_HAVE_ROCM_SMI_HEADERS
  return smi().status;
#else
  static const SmiStatus absent{.available = false, .library = "", .reason = "built without ROCm SMI headers"};
  return absent;
#endif
}

std::optional<uint32_t> rocm_smi_device_count() {
#ifdef RCL_HAVE_ROCM_SMI_HEADERS
  uint32_t count = 0;
  if (smi().status.available && smi().api.num_devices && smi().api.num_devices(&count) == RSMI_STATUS_SUCCESS)
    return count;
#endif
  return std::nullopt;
}

nlohmann::json rocm_smi_sample(uint32_t index) {
  nlohmann::json dev = {{"index", index}};
  bool any = false;
#ifdef RCL_HAVE_ROCM_SMI_HEADERS
  const SmiApi& a = smi().api;
  const auto put = [&](const char* key, auto value) {
    dev[key] = value;
    any = true;
  };
  const std::pair<const char*, uint32_t> sensors[] = {{"temperature_edge_c", RSMI_TEMP_TYPE_EDGE},
                                                      {"temperature_junction_c", RSMI_TEMP_TYPE_JUNCTION},
                                                      {"temperature_memory_c", RSMI_TEMP_TYPE_MEMORY}};
  for (const auto& [key, sensor] : sensors) {
    int64_t millidegrees = 0;
    if (a.temperature && a.temperature(index, sensor, RSMI_TEMP_CURRENT, &millidegrees) == RSMI_STATUS_SUCCESS)
      put(key, static_cast<double>(millidegrees) / 1000.0);
  }
  uint64_t microwatts = 0, bytes = 0, replays = 0;
  if (a.power_ave && a.power_ave(index, 0, &microwatts) == RSMI_STATUS_SUCCESS) put("power_w", microwatts / 1e6);
  if (a.power_cap && a.power_cap(index, 0, &microwatts) == RSMI_STATUS_SUCCESS) put("power_cap_w", microwatts / 1e6);
  if (a.memory_usage && a.memory_usage(index, RSMI_MEM_TYPE_VRAM, &bytes) == RSMI_STATUS_SUCCESS)
    put("vram_used_bytes", bytes);
  if (a.memory_total && a.memory_total(index, RSMI_MEM_TYPE_VRAM, &bytes) == RSMI_STATUS_SUCCESS)
    put("vram_total_bytes", bytes);
  uint32_t percent = 0;
  if (a.busy && a.busy(index, &percent) == RSMI_STATUS_SUCCESS) put("busy_percent", percent);
  if (a.ecc_count) {
    uint64_t correctable = 0, uncorrectable = 0;
    bool counted = false;
    for (const auto block : kEccBlocks) {
      rsmi_error_count_t ec{};
      if (a.ecc_count(index, block, &ec) != RSMI_STATUS_SUCCESS) continue;  // block without RAS
      correctable += ec.correctable_err;
      uncorrectable += ec.uncorrectable_err;
      counted = true;
    }
    if (counted) {
      put("ecc_correctable", correctable);
      put("ecc_uncorrectable", uncorrectable);
    }
  }
  if (a.pci_replay && a.pci_replay(index, &replays) == RSMI_STATUS_SUCCESS) put("pcie_replay_count", replays);
  if (a.gpu_metrics) {
    // Newer libraries append fields to rsmi_gpu_metrics_t and write their whole struct: a
    // buffer far larger than this header's keeps their write inside it. The fields read here
    // sit in the v1 prefix every version keeps.
    alignas(8) static thread_local unsigned char buffer[16384];
    std::fill(std::begin(buffer), std::end(buffer), 0);
    auto* metrics = reinterpret_cast<rsmi_gpu_metrics_t*>(buffer);
    if (a.gpu_metrics(index, metrics) == RSMI_STATUS_SUCCESS) {
      put("gfx_clock_mhz", metrics->current_gfxclk);
      put("mem_clock_mhz", metrics->current_uclk);
      put("throttle_status", metrics->throttle_status);
    }
  }
#endif
  dev["responding"] = any;
  return dev;
}

}  // namespace rcl
