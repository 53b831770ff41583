// The shadow check's verdict on one op (checks/detectors/shadow_check.hpp is the detector that picks the
// op and reports): the op's float64 recomputation through a fixed +-1 projection, compared with
// the bound of checks/detectors/shadow_bound.hpp. On the CPU one pass of plain loops over the operands; on
// a GPU ATen ops on the op's device, whose result the host reads a step later.
#pragma once

#include <array>

#include <torch/torch.h>

#include "rocm_conformance_llm/workload/op_tap.hpp"

namespace rcl {

// The verdict of one op: float64 [worst ratio of error to bound (NaN for a NaN result), relative
// error, 1 if every row was judged]. `output` defaults to op.output. Rows whose inputs hold
// NaN/Inf, or whose true result may exceed the dtype's range (||a_i|| max_j ||b_j|| > its largest
// finite value: an fp16 overflow), are not judged: the non-finite detectors own those. On the
// CPU it is decided by host_verdict, elsewhere by ATen ops on the op's device.
torch::Tensor shadow_verdict(const TappedOp& op, const torch::Tensor& output = {});
// The same verdict by ATen ops, whatever the device (on the CPU: to prove host_verdict equal to it).
torch::Tensor shadow_verdict_aten(const TappedOp& op, const torch::Tensor& output = {});
// The same verdict in one pass of plain loops over CPU tensors, no ATen op (float64 sums).
std::array<double, 3> host_verdict(const TappedOp& op, const torch::Tensor& output = {});
// A GEMM's row and column checksums (the checksum check, checks/detectors/gemm_checksums.hpp):
// c = a b (+ bias along c's rows), a [M, K], b [K, N], c [M, N], one dtype, any strides. Both
// projections are the row verdict above, once for C and once for Cᵀ = Bᵀ Aᵀ. float64 [worst row's
// error over its bound, that row, worst column's error over its bound, that column, 1 if every row
// and column was judged]; a NaN result makes its ratio NaN. On the CPU by host_gemm_checksums
// (plain loops), elsewhere by ATen ops on the device (read by the host a step later).
torch::Tensor gemm_checksums_aten(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                                  const torch::Tensor& c);
std::array<double, 5> host_gemm_checksums(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& bias,
                                          const torch::Tensor& c);
// bf16 or fp16: an output whose projection is summed in fp32, and an op worth re-running in fp32.
bool reduced_precision(torch::ScalarType dtype);
// Whether a verdict's worst ratio says wrong result (above 1, or NaN).
bool shadow_mismatch(double worst_error_over_bound);

}  // namespace rcl
