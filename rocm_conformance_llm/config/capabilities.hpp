// What a run can do (libtorch version, GPU) and what a stress mode or rule needs of it; apart from
// the field tables because it describes the run's build and device, not a config key.
#pragma once

#include <string>

#include "rocm_conformance_llm/config/enums.hpp"

namespace rcl {

// What a run can do: stress modes require it, and `attention_backend=auto` is resolved by it.
struct Capabilities {
  int torch_major = 0;
  int torch_minor = 0;
  bool gpu = false;  // the run uses a GPU
  // This build's libtorch (TORCH_VERSION_MAJOR/MINOR) and `gpu`.
  static Capabilities of_this_build(bool gpu);
};

// `auto` for a run with `caps` computing in `computed_in`, with attention dropout or not (what the
// stress modes leave: stress_modes.hpp `with_attention_resolved`): SDPA wherever libtorch has it
// (>= 2.0) and its kernel is the faster one. On a GPU its fused kernels ran `small` at 20.1% of an
// H200's peak against the explicit path's 11.3% (bench/results-gpu.md). On a CPU only where its
// flash kernel runs, in fp32 without dropout: it ran cpu-medium 4.6% faster (5710 against 5460
// tokens/s, libtorch 2.11, AVX2) and never builds the causal mask over the whole score matrix, but
// the smoke step 17% slower in bf16 (the Hugging Face peer's default is SDPA in both); with dropout
// SDPA falls back to its math kernel (libtorch's check_for_dropout), the explicit path's arithmetic
// with GEMMs the checks do not see. Elsewhere the explicit path. Any other value is the user's
// choice and is returned as it is.
AttentionBackend resolve_attention_backend(AttentionBackend requested, const Capabilities& caps, Precision computed_in,
                                           bool dropout);

// A run resolves `auto` once, when it resolves its request (run/cli_resolve.cpp); what reads the
// config after that (the stress rules, sizing, the model, the trainer) takes the backend that runs
// and throws std::logic_error, naming `reader`, when handed `auto`: a config built in code (tests,
// tools) is resolved by with_attention_resolved (or resolve_attention_backend) first, as a run's is.
void require_resolved(AttentionBackend backend, const char* reader);

// What a mode or rule needs of the run's Capabilities; a mode whose requirement does not hold
// is skipped with the reason.
struct CapabilityRequirement {
  int torch_major = 0;  // libtorch >= torch_major.torch_minor (0.0: any)
  int torch_minor = 0;
  bool gpu = false;                                // needs a GPU
  std::string describe() const;                    // "libtorch >= 2.0, GPU", or "" for none
  std::string unmet(const Capabilities& c) const;  // "" when it holds, else the reason
};

}  // namespace rcl
