#include "rocm_conformance_llm/platform/device.hpp"

#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
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
        "libtorch is using the reference BLAS (~20x slower on CPU): install libopenblas0-openmp "
        "so libblas.so.3 resolves to OpenBLAS");
  // OpenBLAS's OpenMP build runs its GEMMs in libtorch's own OpenMP pool: as many threads as
  // libtorch's. Its pthreads build keeps a pool of its own beside libtorch's, and the two spin
  // against each other: on 2 cores with 2 BLAS threads, a quarter of the smoke steps stalled by
  // over 50 ms and cpu-medium fp32 steps took 1.8x as long (docs/performance.md). That build
  // gets one BLAS thread inside libtorch's pool: its GEMMs then run on one core. Either way the
  // user's OPENBLAS_NUM_THREADS wins.
  using SetThreads = void (*)(int);
  const auto set_blas_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!training_on_cpu || !set_blas_threads || std::getenv("OPENBLAS_NUM_THREADS")) return;
  const auto threading = blas_threading();
  if (threading == "openmp") set_blas_threads(static_cast<int>(threads));
  if (threading == "pthreads") {
    set_blas_threads(1);
    if (threads > 1)
      spdlog::info(
          "OpenBLAS is its pthreads build: its GEMMs run on one core of {} (install libopenblas0-openmp and "
          "rebuild: the binary then loads OpenBLAS's OpenMP build, which shares libtorch's threads)",
          threads);
  }
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

std::string blas_threading() {
  using GetParallel = int (*)();
  const auto get = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (!get) return "";
  switch (get()) {
    case 0: return "sequential";
    case 1: return "pthreads";
    case 2: return "openmp";
    default: return "unknown";
  }
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

namespace {

std::vector<std::string> cpu_flags(const std::string& cpuinfo) {
  std::ifstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::vector<std::string> flags;
      for (std::string w; words >> w;) flags.push_back(w);
      return flags;
    }
  return {};
}

bool has(const std::vector<std::string>& flags, const char* flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

bool has_avx512_core(const std::vector<std::string>& f) {
  return has(f, "avx512f") && has(f, "avx512bw") && has(f, "avx512vl") && has(f, "avx512dq");
}

}  // namespace

std::vector<std::string> cpu_instruction_sets(const std::string& cpuinfo) {
  const auto f = cpu_flags(cpuinfo);
  std::vector<std::string> out;
  if (has(f, "avx2")) out.push_back("AVX2");
  if (has_avx512_core(f)) out.push_back("AVX512");
  if (has(f, "avx512_bf16")) out.push_back("AVX512-BF16");
  if (has(f, "avx512_fp16")) out.push_back("AVX512-FP16");
  if (has(f, "amx_bf16")) out.push_back("AMX");
  return out;
}

CpuGemmFacts CpuGemmFacts::of_this_process(const std::string& cpuinfo) {
  CpuGemmFacts facts{.flags = cpu_flags(cpuinfo),
                     .torch_major = TORCH_VERSION_MAJOR,
                     .onednn = at::hasMKLDNN() && at::globalContext().userEnabledMkldnn()};
  if (const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA")) facts.onednn_max_cpu_isa = isa;
  if (const char* requested = std::getenv("RCL_REDUCED_GEMM")) facts.requested = requested;
  return facts;
}

ReducedGemmPath choose_reduced_gemm(const torch::Device& device, c10::ScalarType dtype, const CpuGemmFacts& facts) {
  const std::string& requested = facts.requested.empty() ? std::string("auto") : facts.requested;
  if (requested != "auto" && requested != "native" && requested != "float32")
    throw ConfigError("invalid RCL_REDUCED_GEMM='" + requested + "': allowed auto, native, float32");
  ReducedGemmPath path{.dtype = dtype, .requested = requested};
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf) {
    path.why = "no bf16/fp16 GEMM in this run";
    return path;
  }
  if (requested != "auto") {
    path.in_float32 = requested == "float32";
    path.why = "RCL_REDUCED_GEMM=" + requested;
    return path;
  }
  if (!device.is_cpu()) {
    path.why = "the GPU's BLAS";
    return path;
  }
  const auto& f = facts.flags;
  const bool bf16 = dtype == c10::kBFloat16;
  if (!bf16 && facts.torch_major < 2) {
    path.why = "libtorch 1.13 has no CPU fp16 GEMM to replace";
    return path;
  }
  // 2.x's oneDNN check asks oneDNN's effective ISA, which ONEDNN_MAX_CPU_ISA can lower.
  const std::string& cap = facts.onednn_max_cpu_isa;
  const bool capped = facts.torch_major >= 2 && !cap.empty() && cap.rfind("AVX512", 0) != 0 &&
                      cap.rfind("AVX10", 0) != 0 && cap.rfind("AMX", 0) != 0 && cap != "ALL" && cap != "AVX2_VNNI_2";
  const bool ne_convert = facts.torch_major >= 2 && has(f, "avx_ne_convert");
  const bool isa = bf16 ? has_avx512_core(f) || ne_convert : has(f, "avx512_fp16") || has(f, "amx_fp16") || ne_convert;
  if (facts.onednn && isa && !capped) {
    path.why = bf16 ? "oneDNN's bf16 kernel (AVX512BW+VL+DQ)" : "oneDNN's fp16 kernel";
    return path;
  }
  path.in_float32 = true;
  path.why = !facts.onednn ? "libtorch without oneDNN: plain loops"
             : capped      ? "ONEDNN_MAX_CPU_ISA=" + cap + " leaves libtorch's GEMM in plain loops"
             : bf16        ? "this CPU has no native bf16 GEMM in libtorch (no AVX512BW+VL+DQ): plain loops"
                           : "this CPU has no native fp16 GEMM in libtorch (no AVX512-FP16/AMX-FP16): plain loops";
  return path;
}

nlohmann::json ReducedGemmPath::to_json() const {
  return {{"dtype", c10::toString(dtype)},
          {"path", in_float32 ? "float32" : "native"},
          {"requested", requested},
          {"why", why}};
}

std::string ReducedGemmPath::describe() const {
  const char* name = dtype == c10::kHalf ? "fp16" : "bf16";
  return in_float32 ? fmt::format("{} GEMMs: computed in float32 on {} operands, results rounded to {} ({})", name,
                                  name, name, why)
                    : fmt::format("{} GEMMs: native ({})", name, why);
}

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
      {"blas_threading", blas_threading()},
      {"intra_op_threads", at::get_num_threads()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"cpu_instruction_sets", cpu_instruction_sets()},
      {"hostname", host_name()},
      {"env", env},
      {"hip_runtime", hip_runtime_report()},
      {"rocm_smi", smi_report(kRocmSmi)},
      {"amd_smi", smi_report(kAmdSmi)},
  };
  return report;
}

}  // namespace rcl
