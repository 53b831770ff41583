// The dtype the model's reductions and softmaxes compute in, one rule shared by the decoder's
// layers and the attention kernels (they live in separate files).
#pragma once

#include <torch/torch.h>

namespace rcl {

// float64 stays float64 (gradient checks); bf16/fp16 compute in float32.
inline c10::ScalarType at_least_float(c10::ScalarType t) { return at::promote_types(t, torch::kFloat); }

}  // namespace rcl
