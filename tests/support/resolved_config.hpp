// A config built in a test resolved as a run resolves its own (run/cli_resolve.cpp): the model,
// the trainer, sizing and the stress rules take the attention backend that runs, never `auto`.
#pragma once

#include <utility>

#include "rocm_conformance_llm/config/capabilities.hpp"
#include "rocm_conformance_llm/config/fields.hpp"

namespace rcl::testing {

// Resolved for the config's own precision and dropout: a run composing stress modes resolves for
// what they leave (stress_modes.hpp with_attention_resolved).
inline TrainingConfig resolved_for(TrainingConfig cfg, const Capabilities& caps) {
  cfg.attention_backend = resolve_attention_backend(cfg.attention_backend, caps, cfg.mixed_precision, cfg.dropout > 0);
  return cfg;
}

// For a run on this build's CPU: `auto` is SDPA in fp32 without dropout with libtorch >= 2.0, else
// the explicit path.
inline TrainingConfig on_the_cpu(TrainingConfig cfg) {
  return resolved_for(std::move(cfg), Capabilities::of_this_build(/*gpu=*/false));
}

}  // namespace rcl::testing
