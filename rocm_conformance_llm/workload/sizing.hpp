// The sizing model: from a composed training configuration and a device described as data,
// the peak memory of a training step, term by term, and the FLOPs of an optimizer step. The
// formulas and what they leave out: docs/sizing.md. Tests pose any device (80 GB, 192 GB) on a
// CPU machine; a run reads its own device's capacity (platform/device.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

// A device as the sizing model sees it.
struct DeviceDescription {
  std::string name;            // where the figures come from, e.g. "--device-memory 80GB"
  int64_t capacity_bytes = 0;  // total memory of one device
  double peak_flops = 0;       // measured dense peak in the run's precision, FLOP/s (0: unknown)
  // An accelerator's caching allocator rounds and caches blocks (allocator slack); the host's
  // malloc does not keep freed activations for tensors.
  bool accelerator = true;
};

// Bytes of one part of the peak, with the formula that gave them (for --explain-stress and docs).
struct MemoryTerm {
  std::string name;
  int64_t bytes = 0;
  std::string formula;
};

struct SizingPrediction {
  int64_t parameters = 0;
  int64_t vocab_size = 0;
  // Held for the whole run: parameters, gradients, AdamW state, ballast.
  std::vector<MemoryTerm> resident;
  // On top of `resident` at the peak of forward + backward (activations, scores, logits, ...).
  std::vector<MemoryTerm> step;
  // On top of `resident` during the optimizer update (its whole-buffer temporaries).
  std::vector<MemoryTerm> optimizer;
  int64_t activation_bytes_per_layer = 0;               // one block's saved tensors
  int64_t checkpointed_activation_bytes_per_layer = 0;  // what a checkpointed block keeps (its input, kept attention)
  std::string peak_phase;                               // "backward" | "optimizer"
  int64_t allocated_peak_bytes = 0;                     // what tensors hold at the peak (the allocator's peak)
  int64_t allocator_slack_bytes = 0;
  int64_t peak_bytes = 0;              // allocated_peak_bytes + allocator_slack_bytes
  int64_t tokens_per_step = 0;         // per rank
  double model_flops_per_step = 0;     // 6N + attention per token (model.hpp flops_per_token)
  double hardware_flops_per_step = 0;  // + the forward activation checkpointing recomputes
  double ideal_step_s = 0;             // hardware FLOPs at the device's peak (0: peak unknown)

  nlohmann::json to_json() const;
};

// The share of an accelerator's allocated peak the caching allocator holds beyond it (block
// rounding, cached segments of other sizes).
inline constexpr double kAllocatorSlackFraction = 0.05;

SizingPrediction predict_step(const TrainingConfig& cfg, const DeviceDescription& device);

// "72.8 GiB" for messages and tables.
std::string gib_text(int64_t bytes);

}  // namespace rcl
