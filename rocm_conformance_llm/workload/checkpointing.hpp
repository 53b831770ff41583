// Activation checkpointing (libtorch has no C++ API for it): trade compute for memory by
// dropping a block's activations in forward and recomputing them in backward. The memory
// stress mode turns it on so long sequences fit, which also doubles the allocate/free
// traffic the ROCr allocator sees per step.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace rcl {

using CheckpointedFunction = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// fn(inputs), keeping only `inputs` for backward. Backward re-runs fn with gradients enabled
// under the generator and autocast state of the original forward, so recomputed dropout
// masks match, then back-propagates through the recomputation; gradients of the parameters
// fn uses accumulate into their .grad. Like PyTorch's reentrant checkpoint it therefore
// needs .backward(), not torch::autograd::grad, and every input must require grad.
std::vector<torch::Tensor> checkpoint_tensors(CheckpointedFunction fn, const std::vector<torch::Tensor>& inputs);

// The same for a function of one tensor to one tensor.
torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& input);

}  // namespace rcl
