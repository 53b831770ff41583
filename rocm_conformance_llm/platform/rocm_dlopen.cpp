#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <vector>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/platform/amd_smi_api.hpp"

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

// Runs `fn` with file descriptor 2 pointed at a temporary file; returns what was written there.
template <typename Fn>
std::string capture_stderr(Fn&& fn) {
  std::fflush(stderr);
  std::cerr.flush();
  FILE* sink = std::tmpfile();
  const int saved = sink ? dup(2) : -1;
  if (saved < 0) {
    if (sink) std::fclose(sink);
    fn();
    return {};
  }
  dup2(fileno(sink), 2);
  fn();
  std::fflush(stderr);
  std::cerr.flush();
  dup2(saved, 2);
  close(saved);
  std::string text;
  std::rewind(sink);
  for (int c; (c = std::fgetc(sink)) != EOF;) text += static_cast<char>(c);
  std::fclose(sink);
  return text;
}

// Opens an SMI library ($`override_var`, else the first of `names` that loads) and runs `init` on
// it (returns "" or why it failed), with the library's start-up chatter on stderr ("Failed to
// open drm root directory /sys/class/drm" on a machine without amdgpu) sent to the debug log.
template <typename Init>
void* open_smi_library(SmiStatus& status, const char* override_var, std::initializer_list<const char*> names,
                       Init&& init) {
  const char* override_path = std::getenv(override_var);
  void* lib = nullptr;
  const std::string noise = capture_stderr([&] {
    status.library = override_path ? override_path : *names.begin();
    lib = override_path ? dlopen(override_path, RTLD_NOW | RTLD_LOCAL) : open_library(names);
    const std::string failed = lib ? std::string(init(lib)) : status.library + " not found";
    status.available = failed.empty();
    status.reason = failed;
  });
  if (!noise.empty()) spdlog::debug("{} start-up output (not shown on the console): {}", status.library, noise);
  return status.available ? lib : nullptr;
}

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

namespace {

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

const SmiLibrary kAmdSmi{"amd-smi", amd_smi_status, amd_smi_device_count, amd_smi_sample};
const SmiLibrary kRocmSmi{"rocm-smi", rocm_smi_status, rocm_smi_device_count, rocm_smi_sample};

const SmiLibrary& telemetry_smi() { return kAmdSmi.status().available ? kAmdSmi : kRocmSmi; }

nlohmann::json smi_report(const SmiLibrary& smi) {
  const SmiStatus& status = smi.status();
  nlohmann::json out = {{"available", status.available}, {"library", status.library}};
  if (!status.available) {
    out["reason"] = status.reason;
    return out;
  }
  auto& devices = out["devices"] = nlohmann::json::array();
  const auto count = smi.device_count();
  for (uint32_t i = 0; i < count.value_or(0); ++i) devices.push_back(smi.sample(i));
  return out;
}

}  // namespace rcl
