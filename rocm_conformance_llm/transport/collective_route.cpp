// The collective kinds' vocabulary (names, bus bandwidth) and how each backend carries a kind:
// pure functions of kind, op, dtype and backend, kept apart from the Communicator that uses them.
#include "rocm_conformance_llm/transport/communicator.hpp"

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <torch/version.h>

namespace rcl {

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::broadcast: return "broadcast";
  }
  return "?";
}

bool is_reduction(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::reduce_scatter: return true;
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all:
    case CollectiveKind::broadcast: return false;
  }
  return false;
}

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "?";
}

double bus_bandwidth_gbps(CollectiveKind kind, int64_t bytes, double seconds, int world_size) {
  if (seconds <= 0 || world_size < 1) return 0.0;
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  const double n = world_size;
  switch (kind) {
    case CollectiveKind::all_reduce: return algbw * 2.0 * (n - 1) / n;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all: return algbw * (n - 1) / n;
    case CollectiveKind::broadcast: return algbw;
  }
  return 0.0;
}

CollectiveRoute route_collective(const std::string& backend, CollectiveKind kind, ReduceOp reduce,
                                 torch::ScalarType dtype) {
  CollectiveRoute route;
  route.how = "native";
  if (backend != "gloo") return route;  // RCCL / NCCL: every kind, op and dtype natively
  constexpr bool gloo_has_bf16 = TORCH_VERSION_MAJOR >= 2;
  constexpr bool gloo_has_allgather_base = TORCH_VERSION_MAJOR >= 2;
  const bool reduces = is_reduction(kind);
  std::vector<std::string> steps;
  if (dtype == torch::kBFloat16 && !gloo_has_bf16) {
    route.carried_as = reduces ? torch::kFloat : torch::kHalf;
    route.reinterpreted = !reduces;
    steps.push_back(reduces ? "bf16 carried as fp32" : "bf16 carried as its 16 bits");
  }
  if (kind == CollectiveKind::all_gather && !gloo_has_allgather_base) {
    route.native = false;
    steps.push_back("all-gather into a list of views of the output");
  }
  if (kind == CollectiveKind::reduce_scatter) {
    // 2.x's Gloo _reduce_scatter_base always sums: ours honours the op, on every version.
    route.native = false;
    steps.push_back("all-reduce of a copy of the input, then this rank's chunk");
  }
  if (reduces && reduce == ReduceOp::avg) {
    route.native = false;
    route.sum_then_divide = true;
    steps.push_back("AVG as SUM then divided by the world size");
  }
  if (!steps.empty()) route.how = fmt::format("{}", fmt::join(steps, "; "));
  return route;
}

std::function<void(CollectiveSample&)> settle_on_device_time(std::function<double()> device_seconds,
                                                             double sampled_seconds, CollectiveKind kind,
                                                             int world_size) {
  return [device_seconds = std::move(device_seconds), sampled_seconds, kind, world_size](CollectiveSample& c) {
    c.seconds += device_seconds() - sampled_seconds;
    c.bus_bandwidth_gbps = bus_bandwidth_gbps(kind, c.bytes, c.seconds, world_size);
  };
}

}  // namespace rcl
