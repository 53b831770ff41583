// One rank's membership of a c10d process group: rendezvous through PyTorch's TCPStore,
// Gloo on CPU or RCCL (ProcessGroupNCCL on ROCm) on a GPU, a timeout on every collective,
// and a heartbeat in the store so that a stuck collective names the rank that never came.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/transport/collective_sample.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"

namespace rcl {

// A collective (or the rendezvous) failed or timed out. The finding (component RCCL,
// severity fail) names the collective, its sequence number, the step and, when the store's
// heartbeats tell, the ranks that never entered it.
class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(Finding finding);
  const Finding& finding() const { return finding_; }

 private:
  Finding finding_;
};

// What a rank last published: the step it was in and the collective it was entering.
struct RankHeartbeat {
  int rank = 0;
  bool seen = false;  // false: the rank never published one
  int64_t step = 0;
  int64_t sequence = 0;  // collectives it had entered
  std::string op;
};

// The collective kinds real training issues: DDP's all-reduce, FSDP/ZeRO's all-gather into one
// tensor and reduce-scatter, MoE's all-to-all, and broadcast.
enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast };
std::string to_string(CollectiveKind kind);  // "all_reduce", "all_gather", ...
// Whether the kind combines the ranks' values with a ReduceOp (all-reduce, reduce-scatter): its
// results depend on the op, its bf16 is carried as fp32 where Gloo lacks it, and its samples,
// battery cases and report rows name the op. The other kinds only move data.
bool is_reduction(CollectiveKind kind);

// nccl-tests' bus bandwidth in GB/s: algbw (bytes / s) scaled by the share of data each rank
// must move, 2(n-1)/n for all-reduce, (n-1)/n for all-gather (bytes = gathered total),
// reduce-scatter (bytes = the whole input) and all-to-all (bytes = what this rank sends),
// 1 for broadcast. Comparable across world sizes, so a slow link stands out.
double bus_bandwidth_gbps(CollectiveKind kind, int64_t bytes, double seconds, int world_size);

enum class ReduceOp { sum, avg, min, max };
std::string to_string(ReduceOp op);  // "sum", "avg", "min", "max"

// How a backend carries one collective: the one place that chooses between the backend's own
// operation and an emulation through what it has (docs/distributed.md, "Collective kinds").
// libtorch's Gloo lacks, in 1.13, `_allgather_base`, reduce-scatter of any form, AVG and
// bfloat16 ("Invalid scalar type"); in 2.x it has bf16 and an `_allgather_base` of its own, but
// its `_reduce_scatter_base` is an all-reduce that ignores the reduce op, and AVG still throws.
// RCCL (ProcessGroupNCCL on ROCm; NCCL on CUDA builds) has every operation natively.
struct CollectiveRoute {
  bool native = true;            // the backend's own operation for this kind
  bool sum_then_divide = false;  // AVG as SUM, then divided by the world size
  // Wire dtype where the backend lacks the tensor's: bf16 travels as fp32 through reductions
  // (exact for values whose result bf16 holds: one rounding instead of one per step) and as its
  // 16 bits (viewed as fp16, never computed on) through data movement. Undefined: as is.
  std::optional<torch::ScalarType> carried_as;
  bool reinterpreted = false;  // carried_as is a same-width view of the bits, not a conversion
  std::string how;             // "native", or what the emulation does, for reports and logs
};
CollectiveRoute route_collective(const std::string& backend, CollectiveKind kind, ReduceOp reduce,
                                 torch::ScalarType dtype);

// The CollectiveSample::settle of a collective timed on the device's stream: its seconds become
// `device_seconds()` plus whatever was added to them after it was sampled at `sampled_seconds`
// (an injected delay survives), and its bus bandwidth follows.
std::function<void(CollectiveSample&)> settle_on_device_time(std::function<double()> device_seconds,
                                                             double sampled_seconds, CollectiveKind kind,
                                                             int world_size);

// "gloo" for a CPU device. For a GPU device, where this libtorch has c10d's NCCL process group
// (RCL_HAVE_C10D_NCCL: the group torch.distributed calls "nccl"), that group under the name of the
// library it runs on, "rccl" in a ROCm libtorch and "nccl" in a CUDA one; else "gloo" (Gloo takes
// device tensors too).
std::string collective_backend(const torch::Device& device);

class Communicator {
 public:
  // Rendezvous at launch.master_addr:master_port (rank 0 serves the TCPStore, unless the
  // launcher already does: launch.launcher_store_prefix), then a group of
  // collective_backend(device) for device tensors; host tensors always travel through Gloo (on
  // a GPU, a second group), so they never wait for the device. A rank that never joins is a
  // CollectiveError after `timeout` naming the ranks that did not arrive.
  static std::unique_ptr<Communicator> connect(const LaunchInfo& launch, const torch::Device& device,
                                               std::chrono::milliseconds timeout);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // A subgroup of this world, as real jobs split tensor- and data-parallel groups out of it: a
  // new c10d group of the same kind (Gloo, or c10d's NCCL group: making TP/DP subgroups is where
  // RCCL segfaulted, TheRock #7874) rendezvousing over the same store under a prefix of its own. Called by the members
  // only (`ranks`: world ranks, in group-rank order; this rank among them); its rank() and world_size() are within the
  // group, and its messages name it.
  std::unique_ptr<Communicator> split(const std::string& name, const std::vector<int>& ranks);

  int rank() const;
  int world_size() const;
  const torch::Device& device() const;
  const std::string& backend() const;  // "gloo" | "rccl" | "nccl"

  // In place, SUM across ranks. `op` labels the sample, the heartbeat and any error.
  CollectiveSample all_reduce_sum(torch::Tensor& tensor, const std::string& op);
  // In place, `reduce` across ranks (route_collective says how this backend does it).
  CollectiveSample all_reduce(torch::Tensor& tensor, ReduceOp reduce, const std::string& op);
  // all_gather_into_tensor: `out` (world_size x in.numel() elements, contiguous) holds rank r's
  // `in` at elements [r * in.numel(), (r + 1) * in.numel()).
  CollectiveSample all_gather_into(torch::Tensor& out, const torch::Tensor& in, const std::string& op);
  // reduce_scatter_tensor: `in` holds world_size chunks of out.numel() elements; `out` (
  // contiguous) becomes the reduction over ranks of chunk `rank()`.
  CollectiveSample reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp reduce, const std::string& op);
  // all_to_all_single: rows (dim 0) of `in` go in_splits[r] to rank r, in rank order; `out`
  // receives out_splits[r] rows from rank r, in rank order. Splits may be uneven.
  CollectiveSample all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits, const std::string& op);
  // MoE token dispatch: an all-to-all of the row counts (`op` + "_counts"), then the uneven
  // all-to-all of the rows; returns the rows received, in rank order. Both samples go to `samples`.
  torch::Tensor all_to_all_uneven(const torch::Tensor& in, const std::vector<int64_t>& in_splits, const std::string& op,
                                  std::vector<CollectiveSample>* samples = nullptr);
  // Every rank's `tensor` (same shape everywhere) stacked along a new leading dimension.
  torch::Tensor all_gather(const torch::Tensor& tensor, const std::string& op, CollectiveSample* sample = nullptr);
  // In place: every rank ends with `root`'s values.
  CollectiveSample broadcast(torch::Tensor& tensor, int root, const std::string& op);

  // Collectives this rank has entered (the next one gets sequence() + 1).
  int64_t sequence() const;
  // The optimizer step now running: quoted by heartbeats and errors.
  void set_step(int64_t step);
  int64_t step() const;

  // Each rank's `value`, exchanged through the store rather than the collective transport, so
  // it still works when the ranks' collectives no longer line up. `name` must be new for each
  // exchange (e.g. carry the step); ranks missing after the timeout give a CollectiveError.
  std::vector<int64_t> exchange_through_store(const std::string& name, int64_t value);

  // Every rank's last heartbeat; nullopt when the store (hosted by rank 0) is unreachable or
  // does not answer within the collective timeout (at most a few seconds).
  std::optional<std::vector<RankHeartbeat>> read_heartbeats() const;

  // Job-level records through the store, not the collective transport: they still travel when a
  // rank is lost. `put_record` sets this rank's record `name` (overwriting its previous one);
  // false when the store did not take it within `limit`. `collect_records` (any rank; the job
  // report's is rank 0) returns every world rank's record `name`, waiting at most `limit` for
  // them all: nullopt for a rank whose record never came. `only`: just these world ranks (the
  // others stay nullopt); empty: every rank.
  bool put_record(const std::string& name, const std::string& value, std::chrono::milliseconds limit);
  std::vector<std::optional<std::string>> collect_records(const std::string& name, std::chrono::milliseconds limit,
                                                          const std::vector<int>& only = {}) const;
  std::chrono::milliseconds timeout() const;

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rcl
