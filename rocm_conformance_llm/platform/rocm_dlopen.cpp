#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

#include <dlfcn.h>

#ifdef RCL_HAVE_HIP_HEADERS
#include <hip/hip_runtime_api.h>
#endif
#ifdef RCL_HAVE_ROCM_SMI_HEADERS
#include <rocm_smi/rocm_smi.h>
#endif

namespace rcl {
namespace {

// The first of `names` that loads; handles stay open for the process's life.
void* open_library(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  return nullptr;
}

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  return handle ? reinterpret_cast<Fn>(dlsym(handle, name)) : nullptr;
}

#ifdef RCL_HAVE_HIP_HEADERS
void* hip_library() {
  static void* handle = open_library({"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"});
  return handle;
}
#endif

#ifdef RCL_HAVE_ROCM_SMI_HEADERS
void* smi_library() {
  static void* handle = open_library({"librocm_smi64.so", "librocm_smi64.so.7", "librocm_smi64.so.6",
                                      "librocm_smi64.so.5", "librocm_smi64.so.1"});
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

nlohmann::json hip_runtime_report() {
  nlohmann::json out = {{"available", false}};
#ifdef RCL_HAVE_HIP_HEADERS
  void* lib = hip_library();
  if (!lib) {
    out["reason"] = "libamdhip64 not found";
    return out;
  }
  auto runtime_version = symbol<hipError_t (*)(int*)>(lib, "hipRuntimeGetVersion");
  auto device_count = symbol<hipError_t (*)(int*)>(lib, "hipGetDeviceCount");
  int version = 0, count = 0;
  if (runtime_version && runtime_version(&version) == hipSuccess) out["runtime_version"] = version;
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

nlohmann::json rocm_smi_report() {
  nlohmann::json out = {{"available", false}};
#ifdef RCL_HAVE_ROCM_SMI_HEADERS
  void* lib = smi_library();
  auto init = symbol<rsmi_status_t (*)(uint64_t)>(lib, "rsmi_init");
  auto num_devices = symbol<rsmi_status_t (*)(uint32_t*)>(lib, "rsmi_num_monitor_devices");
  auto temperature = symbol<rsmi_status_t (*)(uint32_t, uint32_t, rsmi_temperature_metric_t, int64_t*)>(
      lib, "rsmi_dev_temp_metric_get");
  auto busy = symbol<rsmi_status_t (*)(uint32_t, uint32_t*)>(lib, "rsmi_dev_busy_percent_get");
  auto vram_used = symbol<rsmi_status_t (*)(uint32_t, rsmi_memory_type_t, uint64_t*)>(
      lib, "rsmi_dev_memory_usage_get");
  uint32_t count = 0;
  if (!init || init(0) != RSMI_STATUS_SUCCESS || !num_devices || num_devices(&count) != RSMI_STATUS_SUCCESS) {
    out["reason"] = lib ? "rsmi_init failed (no amdgpu driver?)" : "librocm_smi64 not found";
    return out;
  }
  out["available"] = true;
  auto& devices = out["devices"] = nlohmann::json::array();
  for (uint32_t i = 0; i < count; ++i) {
    nlohmann::json dev = {{"index", i}};
    int64_t millidegrees = 0;
    uint32_t percent = 0;
    uint64_t used = 0;
    if (temperature && temperature(i, RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_CURRENT, &millidegrees) == RSMI_STATUS_SUCCESS)
      dev["temperature_c"] = millidegrees / 1000.0;
    if (busy && busy(i, &percent) == RSMI_STATUS_SUCCESS) dev["busy_percent"] = percent;
    if (vram_used && vram_used(i, RSMI_MEM_TYPE_VRAM, &used) == RSMI_STATUS_SUCCESS) dev["vram_used_bytes"] = used;
    devices.push_back(dev);
  }
#else
  out["reason"] = "built without ROCm SMI headers";
#endif
  return out;
}

}  // namespace rcl
