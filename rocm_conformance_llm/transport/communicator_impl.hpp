// Communicator's private state, shared by the files that implement it by role: the collectives
// (communicator.cpp), the rendezvous (communicator_rendezvous.cpp), heartbeats and failure
// findings (communicator_heartbeats.cpp), the store's exchanges and records (communicator_store.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include "rocm_conformance_llm/transport/c10d_group.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"

namespace rcl {

// Store values are bytes; ours are text.
inline std::vector<uint8_t> to_bytes(const std::string& text) { return {text.begin(), text.end()}; }
inline std::string from_bytes(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

struct Communicator::Impl {
  int rank = 0;
  int world_size = 1;
  torch::Device device = torch::kCPU;
  std::string backend;
  // The process group's name in messages: the world's; subgroups (tensor / data parallel) name theirs.
  std::string group_name = "world";
  std::string group_label = "world";  // the same, bare: what samples carry (CollectiveSample::group)
  // Each group rank's world rank (the world: 0..n-1). Messages and findings name world ranks:
  // a group-local index alone names the wrong process.
  std::vector<int> world_ranks;
  std::chrono::milliseconds timeout{0};
  std::string store_address;  // "host:port", for messages
  std::string store_server;   // who serves it, for messages: "rank 0" or the launcher
  std::string master_addr;    // where the rendezvous is: which network Gloo binds
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<C10dGroup> group;
  // Host tensors' group: always Gloo, so the host's own values (loss mean, votes, step times)
  // never wait for the device nor are read back from it. On a CPU device the
  // same group as `group`; on a GPU a second one (RCCL takes device tensors only, and a Gloo
  // device group drains the device before each collective).
  c10::intrusive_ptr<C10dGroup> host_group;
  int64_t sequence = 0;
  int64_t step = 0;

  double timeout_s() const { return std::chrono::duration<double>(timeout).count(); }

  bool is_subgroup() const { return group_label != "world"; }
  int world_rank_of(int group_rank) const { return world_ranks.at(group_rank); }
  // "rank 3", or in a subgroup "rank 3 (group rank 1)".
  std::string who(int group_rank) const {
    if (!is_subgroup()) return fmt::format("rank {}", group_rank);
    return fmt::format("rank {} (group rank {})", world_rank_of(group_rank), group_rank);
  }
  std::vector<int> world_ranks_of(const std::vector<int>& group_ranks) const {
    std::vector<int> out;
    for (const int r : group_ranks) out.push_back(world_rank_of(r));
    return out;
  }

  const c10::intrusive_ptr<C10dGroup>& group_for(const torch::Tensor& tensor) const {
    return tensor.is_cpu() ? host_group : group;
  }
  const std::string& backend_for(const torch::Tensor& tensor) const {
    static const std::string gloo = "gloo";
    return tensor.is_cpu() ? gloo : backend;
  }
  CollectiveRoute route(CollectiveKind kind, ReduceOp reduce, const torch::Tensor& tensor) const {
    return route_collective(backend_for(tensor), kind, reduce, tensor.scalar_type());
  }

  // A fail finding of component RCCL from this rank at this step; evidence gains the backend, the
  // timeout and the store.
  Finding failure(const std::string& signature, std::string message, nlohmann::json evidence) const;
  // This rank's heartbeat: the step, the collectives entered and `op`, which it is entering.
  void publish_heartbeat(const std::string& op);
  // Every rank's last heartbeat in `store`; nullopt when the store does not answer.
  static std::optional<std::vector<RankHeartbeat>> read_heartbeats_from(const c10::intrusive_ptr<c10d::Store>& store,
                                                                        int world_size);

  // The heartbeats, read on a helper thread that is given at most kHeartbeatReadLimit (or the
  // timeout, when shorter): a store server blocked by a stopped peer would otherwise hold this
  // rank for another full timeout. The helper owns a reference to the store, so it may outlive
  // this object.
  std::optional<std::vector<RankHeartbeat>> read_heartbeats_bounded() const;

  // "rank 3" / "ranks 1,3" in world ranks, then the group ranks in a subgroup.
  std::string ranks_clause(const std::vector<int>& group_ranks) const;

  // Who never reached collective #`seq` (0: the rendezvous), from the heartbeats, as a clause
  // for an error message; fills evidence with the heartbeats and the missing ranks.
  std::string absentees(int64_t seq, const std::string& verb, nlohmann::json& evidence) const;

  // Why collective #`seq` failed: who never entered it, or that everyone did and the
  // transport itself stalled.
  Finding diagnose(int64_t seq, const std::string& op, CollectiveKind kind, double elapsed_s,
                   const std::string& error) const;

  // The device group (Gloo, or c10d's NCCL group by capability) and the host tensors' Gloo group
  // of this rank and world_size, rendezvousing under `over` (the world's store, or a subgroup's
  // prefix of it).
  void make_groups(const c10::intrusive_ptr<c10d::Store>& over);

  // Collective #sequence + 1: started by `start`, timed, and diagnosed when it fails (communicator.cpp).
  template <typename Start>
  CollectiveSample run(const std::string& op, CollectiveKind kind, std::optional<ReduceOp> reduce,
                       const torch::Tensor& tensor, int64_t bytes, Start&& start);
};

}  // namespace rcl
