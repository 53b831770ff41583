// The size and cost of the model a config describes, from the config alone: its parameter
// counts and training FLOPs per token, for the sizing model and the reports, which never build it.
#pragma once

#include <cstdint>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

// Trainable parameters of the model `cfg` describes (cfg.vocab_size must be resolved).
int64_t parameter_count(const TrainingConfig& cfg);
// The parameters that take part in a matrix multiply: every one except the learned position
// table, which is only a lookup (the token table counts because the tied LM head multiplies by
// it; grouped-query attention's narrower K/V projections count as they are).
int64_t gemm_parameter_count(const TrainingConfig& cfg);

// Training FLOPs per token (forward + backward), PaLM appendix B:
//   6 * N + 12 * L * hidden * T
// N = gemm_parameter_count less the experts a token is not routed to (moe_experts - moe_top_k
// per layer), L = layers, T = seq_len. The second term is attention's QK^T and AV
// products over every query head.
// Activation recomputation (checkpointing) is not counted: this is model FLOPs, not hardware.
double flops_per_token(const TrainingConfig& cfg);
// The same with only the attention work a causal mask leaves useful: query t scores t keys, so
// the square's term becomes its lower triangle, 6 * L * hidden * (T + 1). The FLOPs a fused
// causal kernel needs; flops_per_token's square is what PaLM's MFU (and most papers) count.
double causal_flops_per_token(const TrainingConfig& cfg);

}  // namespace rcl
