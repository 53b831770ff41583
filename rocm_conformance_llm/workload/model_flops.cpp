#include "rocm_conformance_llm/workload/model_flops.hpp"

#include <algorithm>

#include "rocm_conformance_llm/workload/model_widths.hpp"

namespace rcl {
namespace {

int64_t norm_params(NormKind kind, int64_t dim) { return kind == NormKind::rmsnorm ? dim : 2 * dim; }

// One MLP (or one expert): up (doubled for SwiGLU's gate) and down, with biases.
int64_t mlp_parameters(const TrainingConfig& cfg) {
  const int64_t c = cfg.hidden_size, ffn = ffn_hidden_size(cfg);
  const int64_t up_width = cfg.activation == Activation::swiglu ? 2 * ffn : ffn;
  return c * up_width + up_width + ffn * c + c;
}

// The GEMM parameters one token multiplies by: a mixture of experts routes it through moe_top_k
// of its experts (and the whole router), not all of them.
double active_gemm_parameters(const TrainingConfig& cfg) {
  double active = double(gemm_parameter_count(cfg));
  if (cfg.moe_experts > 0)
    active -= double(cfg.num_layers) * double(cfg.moe_experts - std::min(cfg.moe_top_k, cfg.moe_experts)) *
              double(mlp_parameters(cfg));
  return active;
}

}  // namespace

int64_t parameter_count(const TrainingConfig& cfg) {
  const int64_t c = cfg.hidden_size;
  const int64_t head_dim = c / cfg.num_heads;
  const int64_t qkv_width = qkv_output_width(cfg);
  int64_t block = 0;
  block += (cfg.norm_layout == NormLayout::sandwich ? 4 : 2) * norm_params(cfg.norm, c);
  block += c * qkv_width + qkv_width;        // qkv (K and V narrower under GQA)
  block += qkv_width * cfg.qkv_conv_kernel;  // depthwise conv, no bias
  if (cfg.qk_norm) block += 2 * norm_params(cfg.norm, head_dim);
  block += c * c + c;  // attention output projection
  const int64_t mlp = mlp_parameters(cfg);
  block += cfg.moe_experts > 0 ? cfg.moe_experts * (mlp + c) : mlp;  // MLP, or the experts and their router
  int64_t total = cfg.vocab_size * c + cfg.num_layers * block + norm_params(cfg.norm, c);
  if (cfg.position == PositionEncoding::learned) total += cfg.seq_len * c;
  return total;
}

int64_t gemm_parameter_count(const TrainingConfig& cfg) {
  return parameter_count(cfg) - (cfg.position == PositionEncoding::learned ? cfg.seq_len * cfg.hidden_size : 0);
}

double flops_per_token(const TrainingConfig& cfg) {
  return 6.0 * active_gemm_parameters(cfg) +
         12.0 * double(cfg.num_layers) * double(cfg.hidden_size) * double(cfg.seq_len);
}

double causal_flops_per_token(const TrainingConfig& cfg) {
  return 6.0 * active_gemm_parameters(cfg) +
         6.0 * double(cfg.num_layers) * double(cfg.hidden_size) * double(cfg.seq_len + 1);
}

}  // namespace rcl
