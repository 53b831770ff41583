// torch::matmul for the attention's batched products, with a host path where libtorch's own CPU
// bmm is slow: without MKL (Debian's libtorch, on OpenBLAS) its fp32/fp64 bmm runs the items
// one after another, each a GEMM too small to use more than one core.
#pragma once

#include <torch/torch.h>

namespace rcl {

// Whether `a x b` takes the host path: CPU float32/float64 operands of three or more dims with
// the same batch dims, autocast off, and a libtorch without MKL.
bool batched_matmul_runs_items_in_parallel(const torch::Tensor& a, const torch::Tensor& b);

// torch::matmul(a, b), differentiable: matmul_items_in_parallel where the test above holds.
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

// a [..., m, k] x b [..., k, n] with equal batch dims on the CPU, differentiable: each item is its
// own at::mm on one of libtorch's threads, forward and backward. It is the BLAS call per item of
// libtorch's serial loop, so the same bits as torch::matmul.
torch::Tensor matmul_items_in_parallel(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace rcl
