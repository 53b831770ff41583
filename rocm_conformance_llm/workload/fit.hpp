// Fit after composing: the stress modes compose first (stress_modes.hpp, order-independent);
// then one declared rule adjusts what no mode's invariant protects until the sizing model's
// predicted peak fits a fixed share of the device. docs/sizing.md.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/workload/sizing.hpp"

namespace rcl {

// The fit rule, as data. First `switches_off` (a bool that only trades speed for memory) where
// that lowers the predicted peak; then `lowers` steps down through the divisors of its composed
// value and `keeps_tokens_with` is multiplied by the same factor, so the tokens per optimizer step
// stay exactly what the composition asked for. No mode writes `switches_off`, raises `lowers` or
// lowers `keeps_tokens_with` (tests check the registry), so the fit never undoes a mode's floor or
// ceiling.
struct DeviceFitRule {
  bool TrainingConfig::*switches_off;
  std::string switches_off_why;
  int64_t TrainingConfig::*lowers;
  int64_t TrainingConfig::*keeps_tokens_with;
  double usable_fraction = 0;  // of the device's capacity the predicted peak (with slack) may take
  std::string why;
};
const DeviceFitRule& device_fit_rule();

struct DeviceFit {
  DeviceDescription device;
  int64_t available_bytes = 0;  // usable_fraction x capacity
  SizingPrediction composed;    // the prediction before the fit
  SizingPrediction fitted;      // after it (nothing fits: at a micro-batch of 1, the best it could do)
  TrainingConfig training;      // the fitted configuration
  nlohmann::json changes = nlohmann::json::object();  // {field: [before, after]}
  bool fits = false;
  std::string reason;  // one line: what changed and why (or what it kept), or why it cannot fit

  nlohmann::json to_json() const;
};

DeviceFit fit_to_device(const TrainingConfig& composed, const DeviceDescription& device);

// A CPU run is checked, not fitted: the host's free memory moves with whatever else runs there,
// and a configuration that changed with it would not reproduce. It is refused only when its
// predicted peak, once per rank the host runs, exceeds what the host can give it now.
struct HostMemoryCheck {
  SizingPrediction predicted;  // one rank's (no allocator slack: the host's malloc caches nothing)
  int ranks = 1;               // ranks sharing the host
  int64_t needed_bytes = 0;    // predicted.peak_bytes x ranks
  int64_t available_bytes = 0;
  std::string source;  // where available_bytes came from
  bool fits = true;
  std::string reason;  // one line: what fits, or why not and what to change

  nlohmann::json to_json() const;
};

HostMemoryCheck check_host_memory(const TrainingConfig& cfg, int ranks, int64_t available_bytes,
                                  const std::string& source);

}  // namespace rcl
