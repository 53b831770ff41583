#include "rocm_conformance_llm/workload/batched_matmul.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace {

// a [..., m, k] x b [..., k, n] with equal batch dims, one at::mm per item across libtorch's
// threads. Inside the parallel region OpenBLAS's OpenMP build runs each call on its own thread
// (cpu-medium fp32, libtorch 1.13: the six products of a layer 6.9 -> 2.7 ms, docs/performance.md).
torch::Tensor items_in_parallel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto batch = a.sizes().slice(0, a.dim() - 2);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const auto a3 = a.reshape({-1, m, k}), b3 = b.reshape({-1, k, n});
  auto out = torch::empty({a3.size(0), m, n}, a.options());
  at::parallel_for(0, a3.size(0), 1, [&](int64_t begin, int64_t end) {
    torch::NoGradGuard no_grad;  // the workers' own grad mode: the autograd Function records the graph
    for (int64_t i = begin; i < end; ++i) {
      auto item = out.select(0, i);
      at::mm_out(item, a3.select(0, i), b3.select(0, i));
    }
  });
  std::vector<int64_t> shape(batch.begin(), batch.end());
  shape.insert(shape.end(), {m, n});
  return out.view(shape);
}

struct ItemsInParallel : torch::autograd::Function<ItemsInParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    return items_in_parallel(a, b);
  }
  // bmm's own backward products: dA = dC x Bᵀ, dB = Aᵀ x dC.
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& a = saved[0];
    const auto& b = saved[1];
    const auto& grad = grads[0];
    return {ctx->needs_input_grad(0) ? items_in_parallel(grad, b.transpose(-2, -1)) : torch::Tensor(),
            ctx->needs_input_grad(1) ? items_in_parallel(a.transpose(-2, -1), grad) : torch::Tensor()};
  }
};

}  // namespace

bool batched_matmul_runs_items_in_parallel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto dtype = a.scalar_type();
  return a.device().is_cpu() && b.device().is_cpu() && (dtype == torch::kFloat || dtype == torch::kDouble) &&
         b.scalar_type() == dtype && a.dim() >= 3 && a.dim() == b.dim() &&
         a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2) && a.size(-1) == b.size(-2) &&
         !current_autocast(torch::kCPU).enabled && !at::hasMKL();
}

torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  return batched_matmul_runs_items_in_parallel(a, b) ? matmul_items_in_parallel(a, b) : torch::matmul(a, b);
}

torch::Tensor matmul_items_in_parallel(const torch::Tensor& a, const torch::Tensor& b) {
  return ItemsInParallel::apply(a, b);
}

}  // namespace rcl
