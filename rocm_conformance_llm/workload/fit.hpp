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

// The fit rule, as data. `lowers` steps down through the divisors of its composed value and
// `keeps_tokens_with` is multiplied by the same factor, so the tokens per optimizer step stay
// exactly what the composition asked for. No mode raises `lowers` or lowers `keeps_tokens_with`
// (tests check the registry), so the fit never undoes a mode's floor or ceiling.
struct DeviceFitRule {
  std::string lowers;
  std::string keeps_tokens_with;
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
  std::string reason;  // one line: what changed and why, or why it cannot fit

  nlohmann::json to_json() const;
};

DeviceFit fit_to_device(const TrainingConfig& composed, const DeviceDescription& device);

}  // namespace rcl
