// Turns the text of an exception that killed the run into a component and a signature, so a
// crash is triaged like any other finding. Matching is on substrings that HIP, the PyTorch
// caching allocator, RCCL/NCCL, Gloo, rocBLAS and MIOpen actually print (ROCm builds of PyTorch
// often keep "CUDA error:" prefixes, so no pattern relies on the HIP/CUDA prefix).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

struct ErrorClass {
  std::string component;
  std::string signature;
};

// Signatures: out_of_memory (ROCr allocator; crash_finding makes a CPU run's host_out_of_memory); collective_timeout,
// collective_error (RCCL); illegal_memory_access, gpu_hang, kernel_launch_failure, no_device, hip_error (HIP runtime);
// blas_error (rocBLAS/hipBLASLt); miopen_error (MIOpen); rng_error (rocRAND);
// unclassified_crash (HIP runtime) when nothing matches.
ErrorClass classify_error(std::string_view message);

// The fail finding for a run that died with `message` while in `phase` of `step`. For an
// out-of-memory it adds the last memory sample and the sizes the allocator's message states
// (requested, reserved-but-unallocated: fragmentation when the latter exceeds the former).
// `cpu_run`: the run trained on the CPU, where no ROCm component allocates: its out-of-memory
// is the host's (host_out_of_memory, component host, classified configuration).
Finding crash_finding(std::string_view message, int64_t step, int rank, const std::string& phase,
                      const std::optional<MemorySample>& last_memory, bool cpu_run);

}  // namespace rcl
