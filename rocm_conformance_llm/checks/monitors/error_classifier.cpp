#include "rocm_conformance_llm/checks/monitors/error_classifier.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <regex>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/memory.hpp"

namespace rcl {

namespace {

struct Pattern {
  const char* component;
  const char* signature;
  std::array<const char*, 8> needles;  // lower-case substrings; nullptr ends the list
};

// Most specific first: an OOM or a collective timeout also mentions "HIP error" / "NCCL".
const std::array<Pattern, 11> kPatterns = {{
    {component::allocator,
     "out_of_memory",
     {"out of memory", "hiperroroutofmemory", "outofmemoryerror", "can't allocate memory", "cannot allocate memory",
      "std::bad_alloc", "not enough memory"}},  // the last: c10 CPU allocator
    {component::rccl,
     "collective_timeout",
     {"collective operation timeout", "timed out waiting", "watchdog got stuck", "timeout at nccl work",
      "nccl communicator was aborted"}},
    {component::rccl,
     "collective_error",
     {"connection closed by peer", "connection reset by peer", "ncclsystemerror", "ncclinternalerror",
      "ncclremoteerror", "ncclunhandledcudaerror", "nccl error", "rccl error"}},
    {component::hip_runtime,
     "illegal_memory_access",
     {"illegal memory access", "hiperrorillegaladdress", "memory access fault by gpu",
      "page not present or supervisor privilege", "illegal address"}},
    {component::hip_runtime,
     "gpu_hang",
     {"gpu hang", "hw exception by gpu", "the launch timed out", "hiperrorlaunchtimeout", "gpu reset"}},
    {component::hip_runtime,
     "kernel_launch_failure",
     {"launch failure", "hiperrorlaunchfailure", "invalid device function", "hiperrorinvaliddevicefunction",
      "no kernel image is available", "hiperrornobinaryforgpu", "unable to find code object",
      "too many resources requested for launch"}},
    {component::hip_runtime,
     "no_device",
     {"no hip gpus are available", "hiperrornodevice", "invalid device ordinal", "hiperrorinvaliddevice",
      "no cuda gpus are available", "no rocm-capable device"}},
    {component::rocblas,
     "blas_error",
     {"hipblas_status", "cublas_status", "rocblas_status", "hipblaslt", "rocblas error"}},
    {component::miopen,
     "miopen_error",
     {"miopenstatus", "miopen error", "miopen(hip)", "database disk image is malformed"}},
    {component::rocrand, "rng_error", {"hiprand_status", "rocrand_status", "curand_status"}},
    {component::hip_runtime, "hip_error", {"hip error", "hiperror", "hip runtime error"}},
}};

// "2.00 MiB" -> bytes; the caching allocator prints sizes with these units.
std::optional<double> size_after(const std::string& text, const std::regex& re) {
  std::smatch m;
  if (!std::regex_search(text, m, re)) return std::nullopt;
  const double value = std::stod(m[1].str());
  const std::string unit = m[2].str();
  const double scale = unit == "GiB"   ? 1024.0 * 1024 * 1024
                       : unit == "MiB" ? 1024.0 * 1024
                       : unit == "KiB" ? 1024.0
                                       : 1.0;
  return value * scale;
}

constexpr double kOwnTensorsFillShare = 0.9;

nlohmann::json oom_evidence(const std::string& message) {
  static const std::regex requested(R"(Tried to allocate ([0-9.]+) (GiB|MiB|KiB|bytes|B))");
  static const std::regex requested_cpu(R"(you tried to allocate ([0-9]+) (bytes))");
  static const std::regex unallocated(R"(([0-9.]+) (GiB|MiB|KiB|bytes|B) is reserved by PyTorch but unallocated)");
  static const std::regex allocated(R"(([0-9.]+) (GiB|MiB|KiB|bytes|B) is allocated by PyTorch)");
  static const std::regex capacity(R"(total capacity of ([0-9.]+) (GiB|MiB|KiB|bytes|B))");
  nlohmann::json e = nlohmann::json::object();
  auto req = size_after(message, requested);
  if (!req) req = size_after(message, requested_cpu);
  const auto gap = size_after(message, unallocated);
  const auto alloc = size_after(message, allocated);
  const auto total = size_after(message, capacity);
  if (req) e["requested_bytes"] = *req;
  if (gap) e["reserved_unallocated_bytes"] = *gap;
  if (alloc) e["allocated_by_pytorch_bytes"] = *alloc;
  if (total) e["capacity_bytes"] = *total;
  // pytorch#175431: a 2 MiB request failing with GiBs reserved but unallocated.
  const bool fragmented = req && gap && *gap > *req;
  if (req && gap) e["fragmentation_suspected"] = fragmented;
  // The run's own live tensors, with the one it asked for, fill the device, not a cache beside
  // them: the job does not fit, which is the configuration's doing, not the allocator's. Seen on
  // an H100: `--stress gemm,memory,fusion` on `small` held 72.8 of 79.2 GiB in tensors at its
  // first step; on an H200 it held 111.8 of 139.8 GiB and asked for 24 GiB more.
  if (alloc && total && *total > 0)
    e["own_tensors_fill_device"] = !fragmented && *alloc + req.value_or(0.0) >= kOwnTensorsFillShare * *total;
  return e;
}

}  // namespace

ErrorClass classify_error(std::string_view message) {
  const std::string text = to_lower(message);
  for (const auto& p : kPatterns)
    for (const char* needle : p.needles)
      if (needle && text.find(needle) != std::string::npos) return {p.component, p.signature};
  return {component::hip_runtime, "unclassified_crash"};
}

Finding crash_finding(std::string_view message, int64_t step, int rank, const std::string& phase,
                      const std::optional<MemorySample>& last_memory, bool cpu_run) {
  const ErrorClass c = classify_error(message);
  // First line only in the message: PyTorch appends pages of hints and C++ frames.
  const std::string full(message);
  const std::string first_line = full.substr(0, full.find('\n'));
  Finding f{.component = c.component,
            .signature = c.signature,
            .severity = Severity::fail,
            .step = step,
            .rank = rank,
            .message = "run died in '" + phase + "': " + first_line,
            .evidence = {{"phase", phase}, {"exception", full.substr(0, 4000)}}};
  if (c.signature == "out_of_memory") {
    f.evidence["allocator_message"] = oom_evidence(full);
    if (cpu_run) {
      // libtorch's CPU allocator is malloc: the host ran out, which says nothing about ROCm.
      f.component = component::host;
      f.signature = "host_out_of_memory";
      f.classification = Classification::configuration;
      f.message +=
          " [a CPU run: the host's memory ran out; lower batch_size, seq_len, memory_pressure_bytes or the "
          "model's size, or free the host's memory]";
    } else if (f.evidence["allocator_message"].value("own_tensors_fill_device", false)) {
      f.classification = Classification::configuration;
      f.message +=
          " [the run's own tensors fill the device: the configuration does not fit; lower batch_size, "
          "seq_len or the model's size]";
    }
  }
  if (last_memory) f.evidence["last_memory"] = memory_to_json(*last_memory);
  return f;
}

}  // namespace rcl
