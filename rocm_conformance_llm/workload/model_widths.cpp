#include "rocm_conformance_llm/workload/model_widths.hpp"

#include <cmath>

namespace rcl {

int64_t key_value_width(const TrainingConfig& cfg) { return key_value_heads(cfg) * (cfg.hidden_size / cfg.num_heads); }

int64_t qkv_output_width(const TrainingConfig& cfg) { return cfg.hidden_size + 2 * key_value_width(cfg); }

int64_t ffn_hidden_size(const TrainingConfig& cfg) {
  const double width = cfg.ffn_multiplier * double(cfg.hidden_size);
  if (cfg.activation != Activation::swiglu) return int64_t(std::llround(width));
  const auto two_thirds = int64_t(std::llround(2.0 * width / 3.0));
  return (two_thirds + 7) / 8 * 8;
}

}  // namespace rcl
