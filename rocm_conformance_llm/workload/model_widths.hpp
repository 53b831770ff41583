// The widths of the decoder's layers as the config sets them, below the model so that its pieces
// (the mixture-of-experts layer, the Hugging Face names) and its parallel layouts read them
// without including the model.
#pragma once

#include <cstdint>

#include "rocm_conformance_llm/config.hpp"

namespace rcl {

// Width of K (and of V): key_value_heads(cfg) heads of hidden_size / num_heads; hidden_size
// without grouped-query attention.
int64_t key_value_width(const TrainingConfig& cfg);
// Output width of the fused Q/K/V projection: hidden_size + 2 * key_value_width.
int64_t qkv_output_width(const TrainingConfig& cfg);

// Width of the MLP's hidden layer: ffn_multiplier * hidden for GELU; for SwiGLU 2/3 of that
// rounded up to a multiple of 8 (as LLaMA does) so the three SwiGLU matrices cost about what
// GELU's two do.
int64_t ffn_hidden_size(const TrainingConfig& cfg);

}  // namespace rcl
