// The run's capabilities, `attention_backend=auto` resolved by them, and capability requirements.
#include "rocm_conformance_llm/config/capabilities.hpp"

#include <torch/version.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {

Capabilities Capabilities::of_this_build(bool gpu) {
  return {.torch_major = TORCH_VERSION_MAJOR, .torch_minor = TORCH_VERSION_MINOR, .gpu = gpu};
}

AttentionBackend resolve_attention_backend(AttentionBackend requested, const Capabilities& caps, Precision computed_in,
                                           bool dropout) {
  if (requested != AttentionBackend::automatic) return requested;
  if (caps.torch_major < 2) return AttentionBackend::math;
  const bool cpu_flash_runs = computed_in == Precision::fp32 && !dropout;
  return caps.gpu || cpu_flash_runs ? AttentionBackend::sdpa : AttentionBackend::math;
}

void require_resolved(AttentionBackend backend, const char* reader) {
  if (backend == AttentionBackend::automatic)
    throw std::logic_error(
        fmt::format("{} was handed attention_backend=auto: resolve it for the run's device "
                    "(resolve_attention_backend) before anything reads the config",
                    reader));
}

std::string CapabilityRequirement::describe() const {
  std::vector<std::string> parts;
  if (torch_major > 0 || torch_minor > 0) parts.push_back(fmt::format("libtorch >= {}.{}", torch_major, torch_minor));
  if (gpu) parts.push_back("GPU");
  return join(parts);
}

std::string CapabilityRequirement::unmet(const Capabilities& c) const {
  std::vector<std::string> reasons;
  if (std::pair(c.torch_major, c.torch_minor) < std::pair(torch_major, torch_minor))
    reasons.push_back(fmt::format("needs libtorch >= {}.{} (this build has {}.{})", torch_major, torch_minor,
                                  c.torch_major, c.torch_minor));
  if (gpu && !c.gpu) reasons.push_back("needs a GPU (this run is on the CPU)");
  return join(reasons, "; ");
}

}  // namespace rcl
