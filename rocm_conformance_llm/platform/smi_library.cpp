// Which SMI library telemetry reads, and the environment report's SMI section: the same for
// amd-smi and ROCm SMI, so kept apart from either library's reading code.
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

namespace rcl {

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
