#include "rocm_conformance_llm/platform/device.hpp"

#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <thread>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define RCL_HAVE_ACCELERATOR_STATS 1
#include <ATen/DeviceAccelerator.h>
#endif
// at::accelerator::getMemoryInfo(index) -> {free, total}: in the 2.11 and 2.14 headers.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
#define RCL_HAVE_ACCELERATOR_MEMORY_INFO 1
#endif

namespace rcl {

bool gpu_available() { return torch::cuda::is_available(); }

torch::Device resolve_device(DeviceChoice choice, int local_rank) {
  const bool gpu = gpu_available();
  if (choice == DeviceChoice::cpu || (choice == DeviceChoice::automatic && !gpu)) return torch::Device(torch::kCPU);
  if (!gpu)
    throw ConfigError("invalid --device gpu: no GPU visible to libtorch (" RCL_TORCH_BUILD
                      " build); use --device cpu or auto");
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (local_rank >= count) {
#if defined(RCL_HAVE_C10D_NCCL)
    throw ConfigError(
        fmt::format("invalid local rank {}: {} GPU(s) visible and RCCL (NCCL) needs one GPU per rank "
                    "(\"Duplicate GPU detected\"); start at most {} ranks per node",
                    local_rank, count, count));
#else
    spdlog::warn("local rank {} shares GPU {} ({} visible): this build has no RCCL (NCCL), ranks meet over Gloo",
                 local_rank, local_rank % count, count);
#endif
  }
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
  // The current device decides where allocator figures and collectives' internal buffers go;
  // left at 0, every rank of a node would use GPU 0 for them.
  c10::impl::VirtualGuardImpl(device.type()).setDevice(device);
  return device;
}

std::string prepare_gemm_environment(bool deterministic) {
  // With deterministic algorithms on, libtorch refuses a cuBLAS/hipBLAS GEMM unless the BLAS
  // workspace config is a deterministic one (Context.cpp alertCuBLASConfigNotDeterministic;
  // ROCm builds read the same variable). The library reads it at its first GEMM.
  if (!deterministic || std::getenv("CUBLAS_WORKSPACE_CONFIG")) return "";
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  return "CUBLAS_WORKSPACE_CONFIG=:4096:8";
}

int64_t process_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return -1;
  return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::optional<HostMemory> host_available_memory(const HostMemoryFiles& files) {
  std::ifstream meminfo(files.meminfo);
  std::optional<HostMemory> host;
  for (std::string key; meminfo >> key;) {
    int64_t kib = 0;
    if (key == "MemAvailable:" && meminfo >> kib) {
      host = HostMemory{.available_bytes = kib * 1024, .source = "MemAvailable in " + files.meminfo};
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (!host) return std::nullopt;
  for (const auto& path : files.cgroup_limits) {
    std::ifstream in(path);
    int64_t limit = 0;  // "max" (v2) does not parse: no limit
    if (in >> limit && limit > 0 && limit < host->available_bytes)
      *host = HostMemory{.available_bytes = limit, .source = "the memory cgroup's limit in " + path};
  }
  return host;
}

MemorySample sample_memory(const torch::Device& device) {
  MemorySample m;
  m.rss_bytes = process_rss_bytes();
  m.source = "rss";
  if (!device.is_cuda()) return m;
#ifdef RCL_HAVE_ACCELERATOR_STATS
  // The caching allocator's own books: what tensors hold vs what it holds from ROCr.
  decltype(at::accelerator::getDeviceStats(device.index())) stats;  // zero-initialised Stat counters
  try {
    stats = at::accelerator::getDeviceStats(device.index());
  } catch (const c10::Error&) {
    // Before the first allocation on the device the allocator has no books for it ("Invalid
    // device argument", seen on an H100 with libtorch 2.11): nothing is held yet, all zeros.
  }
  constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  m.allocated_bytes = stats.allocated_bytes[all].current;
  m.reserved_bytes = stats.reserved_bytes[all].current;
  m.peak_allocated_bytes = stats.allocated_bytes[all].peak;
  m.source = "accelerator";
#else
  // Older libtorch: the device-wide use HIP reports (all processes), as "reserved".
  if (auto info = hip_mem_info()) {
    m.reserved_bytes = info->total_bytes - info->free_bytes;
    m.source = "hip";
  }
#endif
  return m;
}

std::optional<int64_t> gpu_memory_bytes(int local_rank) {
  if (!gpu_available()) return std::nullopt;
#ifdef RCL_HAVE_ACCELERATOR_MEMORY_INFO
  const auto count = static_cast<int>(torch::cuda::device_count());
  const auto info = at::accelerator::getMemoryInfo(static_cast<c10::DeviceIndex>(local_rank % count));
  return static_cast<int64_t>(info.second);
#else
  (void)local_rank;
  if (const auto info = hip_mem_info()) return info->total_bytes;
  return std::nullopt;
#endif
}

std::string active_blas() {
  // Whatever libblas.so.3 resolved to at load time exports its vendor's own entry points.
  if (dlsym(RTLD_DEFAULT, "openblas_get_config")) return "openblas";
  if (dlsym(RTLD_DEFAULT, "mkl_get_version")) return "mkl";
  if (dlsym(RTLD_DEFAULT, "bli_info_get_version_str")) return "blis";
  if (void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_")) {
    // PyPI's wheels link their BLAS into libtorch_cpu.so (MKL on x86_64: BLAS_INFO=mkl in
    // torch.__config__), which exports sgemm_ and none of the vendor's own entry points: that is
    // not the reference BLAS, and installing OpenBLAS would not change it.
    Dl_info where{};
    if (dladdr(sgemm, &where) && where.dli_fname &&
        std::string(where.dli_fname).find("libtorch_cpu") != std::string::npos)
      return "bundled";
    return "reference";
  }
  return "unknown";
}

void configure_cpu_threads(int64_t num_threads, int ranks_on_host, bool training_on_cpu) {
  const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t threads = num_threads;
  if (threads <= 0) {
    const char* omp = std::getenv("OMP_NUM_THREADS");
    threads = omp && std::atoi(omp) > 0 ? std::atoi(omp) : std::max<int64_t>(1, cores / std::max(1, ranks_on_host));
  }
  torch::set_num_threads(static_cast<int>(threads));
  const auto blas = active_blas();
  if (training_on_cpu && blas == "reference")
    spdlog::warn(
        "libtorch is using the reference BLAS (~20x slower on CPU): install libopenblas0-pthread "
        "so libblas.so.3 resolves to OpenBLAS");
  // OpenBLAS keeps its own thread pool beside libtorch's, and the two spin against each other:
  // on 2 cores with 2 BLAS threads, a quarter of the smoke steps stalled by over 50 ms and
  // cpu-medium fp32 steps took 1.5x as long (docs/performance.md).
  // One BLAS thread inside libtorch's pool, unless the user set OPENBLAS_NUM_THREADS.
  using SetThreads = void (*)(int);
  if (training_on_cpu && blas == "openblas" && !std::getenv("OPENBLAS_NUM_THREADS"))
    if (auto set_blas_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      set_blas_threads(1);
}

void tune_host_allocator() {
  // With glibc's defaults each step hands its activations back to the OS and faults them in
  // again: ~2,250 page faults per smoke step, ~1 with these thresholds (docs/performance.md).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

int blas_threads() {
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get ? get() : -1;
}

namespace {
// Environment variables that change what ROCm does underneath libtorch; recorded in every
// report so two runs can be compared knob for knob.
const char* const kRocmEnvironment[] = {
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION",
    "HSA_ENABLE_SDMA", "HSA_XNACK", "AMD_SERIALIZE_KERNEL", "AMD_LOG_LEVEL", "HIP_LAUNCH_BLOCKING",
    "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_BLAS_PREFER_HIPBLASLT", "PYTORCH_TUNABLEOP_ENABLED",
    "PYTORCH_TUNABLEOP_TUNING", "PYTORCH_TUNABLEOP_FILENAME", "PYTORCH_TUNABLEOP_NUMERICAL_CHECK",
    "PYTORCH_TUNABLEOP_ROTATING_BUFFER_SIZE", "MIOPEN_FIND_MODE", "MIOPEN_USER_DB_PATH", "MIOPEN_DEBUG_DISABLE_FIND_DB",
    "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_SOCKET_IFNAME", "RCCL_MSCCLPP_ENABLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE", "ROCM_PATH",
    // 2.9+ reads PYTORCH_ALLOC_CONF in place of the device-named ones above.
    "PYTORCH_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "TORCH_CUDNN_SDPA_PREFERRED"};
}  // namespace

nlohmann::json environment_report(const torch::Device& device) {
  nlohmann::json env = nlohmann::json::object();
  for (const char* name : kRocmEnvironment)
    if (const char* value = std::getenv(name)) env[name] = value;

  nlohmann::json report = {
      {"libtorch_version", TORCH_VERSION},
      {"libtorch_build", RCL_TORCH_BUILD},
      {"device", device.str()},
      {"device_kind", device.is_cuda() ? (std::string(RCL_TORCH_BUILD) == "rocm" ? "rocm-gpu" : "gpu") : "cpu"},
      {"gpu_count", gpu_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0},
      {"blas", active_blas()},
      {"blas_threads", blas_threads()},
      {"intra_op_threads", at::get_num_threads()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"hostname", host_name()},
      {"env", env},
      {"hip_runtime", hip_runtime_report()},
      {"rocm_smi", smi_report(kRocmSmi)},
      {"amd_smi", smi_report(kAmdSmi)},
  };
  return report;
}

}  // namespace rcl
