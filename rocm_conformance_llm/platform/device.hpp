// What the run is on: device choice, device and build facts, memory figures and the
// environment variables that change ROCm behaviour. Device-agnostic libtorch only; HIP and
// ROCm SMI facts come through dlopen (platform/rocm_dlopen.cpp) so the binary runs without them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/platform/memory_sample.hpp"

namespace rcl {

bool gpu_available();  // torch::cuda::is_available(): the HIP device on ROCm builds
// "auto" -> GPU when present else CPU; "gpu" without one is a ConfigError. Makes the chosen GPU
// the current device. A local rank beyond the visible GPUs is refused where ranks meet over RCCL
// (one GPU per rank) and shares a GPU, with a warning, where they meet over Gloo.
torch::Device resolve_device(DeviceChoice choice, int local_rank);

// Deterministic mode: sets CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set it (call before
// the first GEMM). Returns what was set, for the log; empty when nothing was.
std::string prepare_gemm_environment(bool deterministic);

// Device allocator figures where exposed, else process RSS (MemorySample::source says which).
MemorySample sample_memory(const torch::Device& device);
// Total memory of the GPU `local_rank` uses (local_rank modulo the visible GPUs): libtorch's
// accelerator API where it has one (>= 2.11), else the HIP runtime's current device through
// dlopen; nullopt when neither can tell (then no fit is made, docs/sizing.md).
std::optional<int64_t> gpu_memory_bytes(int local_rank);
int64_t process_rss_bytes();

// What the host can give a CPU run now: /proc/meminfo's MemAvailable (allocatable without
// swapping, reclaimable page cache included), or a memory cgroup's limit where that is lower (a
// container's). nullopt when MemAvailable cannot be read: then no CPU run is refused for memory.
struct HostMemory {
  int64_t available_bytes = 0;
  std::string source;  // where the figure came from, for the refusal's line
};
struct HostMemoryFiles {  // the tests pose a host through these
  std::string meminfo = "/proc/meminfo";
  std::vector<std::string> cgroup_limits = {"/sys/fs/cgroup/memory.max",                     // cgroup v2
                                            "/sys/fs/cgroup/memory/memory.limit_in_bytes"};  // cgroup v1
};
std::optional<HostMemory> host_available_memory(const HostMemoryFiles& files = {});

// libtorch version and build kind, device name, BLAS in use, thread counts, ROCm env vars.
nlohmann::json environment_report(const torch::Device& device);

// Sets intra-op threads; warns when the BLAS libtorch calls is the slow reference one.
// num_threads 0: OMP_NUM_THREADS when set, else the cores shared among `ranks_on_host`
// processes (several CPU ranks each taking every core oversubscribe the host several-fold).
// Training on the CPU also runs OpenBLAS's pthreads build single-threaded inside libtorch's pool
// (unless OPENBLAS_NUM_THREADS is set; its OpenMP build shares libtorch's threads); with a GPU
// the host BLAS only builds the canaries' float64 references and keeps its threads.
void configure_cpu_threads(int64_t num_threads, int ranks_on_host, bool training_on_cpu);
std::string active_blas();  // "openblas" | "mkl" | "blis" | "reference" | "unknown"
// OpenBLAS's own thread count (-1 when the BLAS is not OpenBLAS).
int blas_threads();
// How OpenBLAS was built to thread: "openmp" | "pthreads" | "sequential" ("" when the BLAS is
// not OpenBLAS).
std::string blas_threading();
// Keeps freed activations in the heap instead of unmapping and re-faulting them every step.
void tune_host_allocator();

// The CPU's instruction sets that decide how fast a GEMM runs, from /proc/cpuinfo's flags:
// "AVX2", "AVX512" (F+BW+VL+DQ), "AVX512-BF16", "AVX512-FP16", "AMX" (AMX-BF16). What every
// figure names its machine by; empty where the flags cannot be read.
std::vector<std::string> cpu_instruction_sets(const std::string& cpuinfo = "/proc/cpuinfo");

// How the run's bf16/fp16 GEMMs are computed, decided once per run (select_device) and put in
// force by set_reduced_gemm_in_float32 (workload/precision.hpp). libtorch's CPU GEMM in bf16 is
// oneDNN's only where its check passes (1.13: AVX512BW+VL+DQ; 2.x: the same, or AVX-NE-CONVERT;
// fp16: AVX512-FP16/AMX-FP16/AVX-NE-CONVERT, >= 2.x); elsewhere ATen's plain loops, 50-200x
// slower. There the GEMM runs in float32 on the bf16/fp16 operands and its result is rounded back:
// a native kernel's arithmetic (products of the rounded operands summed in float32), in another
// summation order. RCL_REDUCED_GEMM=native|float32 forces either (tests, measurements); auto or
// unset decides by the device.
struct ReducedGemmPath {
  c10::ScalarType dtype = c10::ScalarType::BFloat16;
  bool in_float32 = false;  // false: libtorch's own kernel in `dtype`
  std::string requested = "auto";
  std::string why;  // one clause, for the log and report.json
  nlohmann::json to_json() const;
  std::string describe() const;  // "bf16 GEMMs: ... (why)"
};
struct CpuGemmFacts {              // what the choice reads; the tests pose a CPU through it
  std::vector<std::string> flags;  // /proc/cpuinfo's, lower case
  int torch_major = 0;
  bool onednn = false;             // libtorch has oneDNN and it is enabled
  std::string onednn_max_cpu_isa;  // ONEDNN_MAX_CPU_ISA (2.x's check honours it)
  std::string requested = "auto";  // RCL_REDUCED_GEMM
  static CpuGemmFacts of_this_process(const std::string& cpuinfo = "/proc/cpuinfo");
};
ReducedGemmPath choose_reduced_gemm(const torch::Device& device, c10::ScalarType dtype, const CpuGemmFacts& facts);

}  // namespace rcl
