#include "rocm_conformance_llm/transport/collective_battery.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

// One row per (kind, op): the dtypes it runs in. fp32 and bf16 are what FSDP/ZeRO/Megatron
// reduce in; int64 is what MoE exchanges (token counts, indices) and gathers.
struct CaseFamily {
  CollectiveKind kind;
  ReduceOp reduce;
  std::vector<torch::ScalarType> dtypes;
};

const std::vector<CaseFamily>& case_families() {
  static const std::vector<CaseFamily> families = {
      {CollectiveKind::all_reduce, ReduceOp::sum, {torch::kFloat, torch::kBFloat16}},
      // Wrong MIN/MAX results: rccl PR #745 (kernel pointers swapped).
      {CollectiveKind::all_reduce, ReduceOp::max, {torch::kFloat}},
      {CollectiveKind::all_reduce, ReduceOp::min, {torch::kFloat}},
      {CollectiveKind::all_gather, ReduceOp::sum, {torch::kFloat, torch::kBFloat16, torch::kLong}},
      {CollectiveKind::reduce_scatter, ReduceOp::sum, {torch::kFloat, torch::kBFloat16}},
      // FSDP2 reduce-scatters gradients with AVG.
      {CollectiveKind::reduce_scatter, ReduceOp::avg, {torch::kFloat, torch::kBFloat16}},
      {CollectiveKind::all_to_all, ReduceOp::sum, {torch::kFloat, torch::kBFloat16, torch::kLong}},
      {CollectiveKind::broadcast, ReduceOp::sum, {torch::kFloat, torch::kBFloat16}},
  };
  return families;
}

constexpr int64_t kCandidateSizes[] = {int64_t{32} << 10, int64_t{1} << 20, int64_t{3} << 20, int64_t{12} << 20};

int64_t element_size(torch::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

// Elements of rank `from`'s all-to-all input that precede its part for rank `to`.
int64_t all_to_all_offset(int from, int to, int world, int64_t numel) {
  int64_t offset = 0;
  for (int q = 0; q < to; ++q) offset += all_to_all_split(from, q, world, numel);
  return offset;
}

// Counts `got` (any dtype) against `expected` (float64), exactly; with `rounded` (AVG over a
// world that is not a power of two, where 1/n is inexact and implementations divide at different
// points) within 2 ulp of the dtype, as rccl-tests allows.
void compare(const torch::Tensor& got, const torch::Tensor& expected, bool rounded, BatteryOutcome& out) {
  const torch::Tensor g = got.reshape(-1).to(torch::kCPU, torch::kDouble);
  torch::Tensor wrong;
  if (rounded) {
    const double eps = got.scalar_type() == torch::kBFloat16 ? 1.0 / 128 : 1.0 / (1 << 23);
    wrong = (g - expected).abs().gt(expected.abs() * (2 * eps)) | g.isnan();
  } else {
    wrong = g.ne(expected);  // NaN compares unequal: caught
  }
  out.wrong_elements = wrong.sum().item<int64_t>();
  if (out.wrong_elements == 0) return;
  out.first_index = wrong.nonzero()[0][0].item<int64_t>();
  out.got = g[out.first_index].item<double>();
  out.expected = expected[out.first_index].item<double>();
}

}  // namespace

std::string BatteryCase::name() const {
  return fmt::format("{}{}/{}/{}", to_string(kind), is_reduction(kind) ? "/" + to_string(reduce) : "",
                     c10::toString(dtype), binary_size_text(bytes));
}

std::vector<int64_t> battery_sizes(int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (const int64_t s : kCandidateSizes)
    if (s <= max_bytes) sizes.push_back(s);
  return sizes;
}

std::vector<BatteryCase> battery_cases(const std::vector<int64_t>& sizes) {
  std::vector<BatteryCase> cases;
  for (const int64_t bytes : sizes)
    for (const auto& family : case_families())
      for (const auto dtype : family.dtypes) cases.push_back({family.kind, family.reduce, dtype, bytes});
  return cases;
}

torch::Tensor battery_values(uint64_t seed, int rank, int world_size, int64_t start, int64_t count) {
  const int64_t range = std::max<int64_t>(2, 256 / std::max(1, world_size));
  const int64_t salt = static_cast<int64_t>(seed % 65521) * 97 + (rank + 1) * int64_t{40503};
  return (torch::arange(start, start + count, torch::kLong) * int64_t{2654435761} + salt)
      .remainder(65521)
      .remainder(range);
}

int64_t all_to_all_split(int from, int to, int world_size, int64_t numel) {
  const int64_t unit = std::max<int64_t>(1, numel / (2 * world_size));  // weights 1..3 average 2
  return unit * (1 + (from + 2 * to) % 3);
}

std::vector<BatteryOutcome> run_battery(Communicator& comm, const std::vector<BatteryCase>& cases, uint64_t seed,
                                        const BatteryFaults& faults) {
  const int world = comm.world_size();
  const int me = comm.rank();
  const auto on_device = [&](const torch::Tensor& values, torch::ScalarType dtype) {
    return values.to(comm.device(), dtype);
  };
  const auto values = [&](int rank, int64_t start, int64_t count) {
    return battery_values(seed, rank, world, start, count);
  };
  bool stalled = false;
  std::vector<BatteryOutcome> outcomes;
  for (size_t index = 0; index < cases.size(); ++index) {
    const BatteryCase& c = cases[index];
    BatteryOutcome out;
    out.c = c;
    out.route = route_collective(comm.device().is_cpu() ? "gloo" : comm.backend(), c.kind, c.reduce, c.dtype).how;
    const int64_t numel = std::max<int64_t>(world, c.bytes / element_size(c.dtype));
    const std::string label = "battery_" + to_string(c.kind);
    torch::Tensor result, expected;  // expected: float64 on the host
    bool source_by_segment = false;  // the output's segments come from ranks in order
    std::vector<int64_t> segment_ends;
    switch (c.kind) {
      case CollectiveKind::all_reduce: {
        torch::Tensor mine = on_device(values(me, 0, numel), c.dtype);
        torch::Tensor acc = values(0, 0, numel);
        for (int r = 1; r < world; ++r) {
          const torch::Tensor v = values(r, 0, numel);
          acc = c.reduce == ReduceOp::max   ? torch::maximum(acc, v)
                : c.reduce == ReduceOp::min ? torch::minimum(acc, v)
                                            : acc + v;
        }
        out.seconds = comm.all_reduce(mine, c.reduce, label).seconds;
        result = mine;
        expected = acc.to(torch::kDouble);
        break;
      }
      case CollectiveKind::all_gather: {
        const int64_t shard = numel / world;
        torch::Tensor mine = values(me, 0, shard);
        if (faults.wrong_shard) mine[0] += 1;
        torch::Tensor gathered =
            torch::empty({shard * world}, torch::TensorOptions().dtype(c.dtype).device(comm.device()));
        out.seconds = comm.all_gather_into(gathered, on_device(mine, c.dtype), label).seconds;
        std::vector<torch::Tensor> parts;
        for (int r = 0; r < world; ++r) {
          parts.push_back(values(r, 0, shard));
          segment_ends.push_back((r + 1) * shard);
        }
        result = gathered;
        expected = torch::cat(parts).to(torch::kDouble);
        source_by_segment = true;
        break;
      }
      case CollectiveKind::reduce_scatter: {
        const int64_t chunk = numel / world;
        torch::Tensor mine = values(me, 0, chunk * world);
        if (faults.wrong_shard) mine.view({world, chunk}).select(1, 0).add_(1);  // every rank's chunk
        torch::Tensor acc = values(0, me * chunk, chunk);
        for (int r = 1; r < world; ++r) acc = acc + values(r, me * chunk, chunk);
        torch::Tensor scattered = torch::empty({chunk}, torch::TensorOptions().dtype(c.dtype).device(comm.device()));
        if (faults.stall_before_reduce_scatter_s > 0 && !stalled) {
          stalled = true;  // a rank stuck before the collective: its peers wait inside it
          std::this_thread::sleep_for(std::chrono::duration<double>(faults.stall_before_reduce_scatter_s));
        }
        out.seconds = comm.reduce_scatter(scattered, on_device(mine, c.dtype), c.reduce, label).seconds;
        result = scattered;
        expected = acc.to(torch::kDouble);
        if (c.reduce == ReduceOp::avg) expected.div_(world);
        break;
      }
      case CollectiveKind::all_to_all: {
        std::vector<int64_t> send;
        for (int q = 0; q < world; ++q) send.push_back(all_to_all_split(me, q, world, numel));
        int64_t total = 0;
        for (const int64_t s : send) total += s;
        std::vector<torch::Tensor> parts;
        int64_t end = 0;
        for (int r = 0; r < world; ++r) {
          const int64_t rows = all_to_all_split(r, me, world, numel);
          parts.push_back(values(r, all_to_all_offset(r, me, world, numel), rows));
          segment_ends.push_back(end += rows);
        }
        if (faults.slow_all_to_all_s > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(faults.slow_all_to_all_s));
        std::vector<CollectiveSample> samples;
        result = comm.all_to_all_uneven(on_device(values(me, 0, total), c.dtype), send, label, &samples);
        out.seconds = samples[0].seconds + samples[1].seconds;  // the whole dispatch: counts, then rows
        expected = torch::cat(parts).to(torch::kDouble);
        source_by_segment = true;
        if (result.numel() != expected.numel()) {  // the counts' all-to-all itself went wrong
          out.wrong_elements = std::abs(result.numel() - expected.numel());
          out.got = static_cast<double>(result.numel());
          out.expected = static_cast<double>(expected.numel());
          outcomes.push_back(out);
          continue;
        }
        break;
      }
      case CollectiveKind::broadcast: {
        const int root = static_cast<int>(index % world);  // every rank a root in turn
        torch::Tensor mine = on_device(values(me, 0, numel), c.dtype);
        out.seconds = comm.broadcast(mine, root, label).seconds;
        result = mine;
        expected = values(root, 0, numel).to(torch::kDouble);
        break;
      }
    }
    const bool power_of_two = (world & (world - 1)) == 0;
    compare(result, expected, c.reduce == ReduceOp::avg && !power_of_two, out);
    if (out.wrong_elements > 0 && source_by_segment) {
      out.source_rank = static_cast<int>(std::upper_bound(segment_ends.begin(), segment_ends.end(), out.first_index) -
                                         segment_ends.begin());
    }
    outcomes.push_back(out);
  }
  return outcomes;
}

}  // namespace rcl
