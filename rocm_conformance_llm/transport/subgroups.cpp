#include "rocm_conformance_llm/transport/subgroups.hpp"

#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "rocm_conformance_llm/transport/sharded_sync.hpp"

namespace rcl {

std::vector<int> ParallelLayout::tensor_group(int rank) const {
  std::vector<int> ranks(tensor_degree);
  std::iota(ranks.begin(), ranks.end(), rank / tensor_degree * tensor_degree);
  return ranks;
}

std::vector<int> ParallelLayout::data_group(int rank) const {
  std::vector<int> ranks;
  for (int r = rank % tensor_degree; r < world_size; r += tensor_degree) ranks.push_back(r);
  return ranks;
}

std::vector<int> ParallelLayout::expert_group(int rank) const {
  const std::vector<int> data = data_group(rank);
  const int index = rank / tensor_degree;  // this rank's place in its data-parallel group
  const int first = index / expert_degree * expert_degree;
  return {data.begin() + first, data.begin() + first + expert_degree};
}

int ParallelLayout::expert_rank(int rank) const { return rank / tensor_degree % expert_degree; }

std::vector<int> ParallelLayout::expert_data_group(int rank) const {
  std::vector<int> ranks;
  for (const int r : data_group(rank))
    if (expert_rank(r) == expert_rank(rank)) ranks.push_back(r);
  return ranks;
}

GroupPlan plan_group(const TrainingConfig& cfg, int world_size) {
  GroupPlan plan{.layout = plan_parallel_layout(cfg, world_size),
                 .collective_timeout = std::chrono::milliseconds(std::llround(cfg.collective_timeout_s * 1000.0)),
                 .model = cfg};
  plan.model.moe_experts = plan.layout.moe_experts;
  return plan;
}

ParallelLayout plan_parallel_layout(const TrainingConfig& cfg, int world_size) {
  ParallelLayout layout;
  layout.world_size = world_size;
  // FSDP's units are whole dense blocks (transport/fsdp_sync.hpp): with several ranks it keeps the
  // model unsplit, so the comm mode's tensor split and experts compose with it as recorded no-ops.
  const bool fsdp = cfg.data_parallel == DataParallel::fsdp && world_size > 1;
  int asked = fsdp ? 1 : static_cast<int>(cfg.tensor_parallel_degree);
  if (fsdp && cfg.tensor_parallel_degree > 1)
    layout.notes.push_back(
        fmt::format("tensor_parallel_degree={} with data_parallel fsdp, whose units are whole "
                    "blocks: 1 used",
                    cfg.tensor_parallel_degree));
  // The comm mode's split must not take away the data-parallel collectives (ZeRO's reduce-scatter
  // and all-gather, the experts' all-to-all): it applies only where two or more replicas remain.
  if (const int distributed = static_cast<int>(cfg.distributed_tensor_parallel_degree);
      cfg.tensor_parallel_degree == 1 && distributed > 1) {
    const int both_allow = std::gcd(distributed, world_size);
    int fits = both_allow;  // its largest divisor that leaves two replicas
    while (fits > 1 && (both_allow % fits != 0 || world_size / fits < 2)) --fits;
    if (fsdp || fits == 1) {
      layout.notes.push_back(
          fmt::format("distributed_tensor_parallel_degree={}: {}, no tensor split", distributed,
                      fsdp ? "data_parallel fsdp keeps whole blocks"
                           : fmt::format("a world of {} leaves fewer than two data-parallel replicas", world_size)));
    } else {
      asked = fits;
      layout.notes.push_back(
          fmt::format("distributed_tensor_parallel_degree={}: tensor parallel over {} ranks", distributed, fits));
    }
  }
  const int world_allows = std::gcd(asked, world_size);
  if (world_allows != asked)
    layout.notes.push_back(fmt::format("tensor_parallel_degree={} does not divide the world of {} ranks: {} used",
                                       asked, world_size, world_allows));
  // Each rank keeps whole heads and whole key/value heads (and, sequence parallel, an equal
  // slice of the sequence): the largest divisor of what the world allows that the model allows.
  const int64_t kv_heads = cfg.num_key_value_heads == 0 ? cfg.num_heads : cfg.num_key_value_heads;
  const auto model_allows = [&](int d) {
    return world_allows % d == 0 && cfg.num_heads % d == 0 && kv_heads % d == 0 &&
           (!cfg.sequence_parallel || cfg.seq_len % d == 0);
  };
  layout.tensor_degree = world_allows;
  while (!model_allows(layout.tensor_degree)) --layout.tensor_degree;
  if (layout.tensor_degree != world_allows)
    layout.notes.push_back(
        fmt::format("tensor_parallel_degree={} does not divide num_heads={}, num_key_value_heads={}{}: "
                    "{} used",
                    world_allows, cfg.num_heads, kv_heads,
                    cfg.sequence_parallel ? fmt::format(" and seq_len={}", cfg.seq_len) : "", layout.tensor_degree));
  layout.data_degree = world_size / layout.tensor_degree;
  layout.sequence_parallel = cfg.sequence_parallel && layout.tensor_degree > 1;
  if (cfg.sequence_parallel && !layout.sequence_parallel)
    layout.notes.push_back("sequence_parallel=true without tensor parallelism (degree 1): nothing to split, off");
  layout.moe_experts = cfg.moe_experts;
  if (cfg.moe_experts == 0 && cfg.distributed_moe_experts > 0) {
    if (fsdp) {
      layout.notes.push_back(
          fmt::format("distributed_moe_experts={} with data_parallel fsdp, whose units are dense "
                      "blocks: the dense MLP kept",
                      cfg.distributed_moe_experts));
    } else if (layout.data_degree > 1) {
      layout.moe_experts = cfg.distributed_moe_experts;
      layout.notes.push_back(fmt::format("distributed_moe_experts={}: a mixture of experts in place of the dense MLP",
                                         cfg.distributed_moe_experts));
    } else {
      layout.notes.push_back(
          fmt::format("distributed_moe_experts={}: one data-parallel rank has no experts to shard, "
                      "the dense MLP kept",
                      cfg.distributed_moe_experts));
    }
  }
  if (layout.moe_experts > 0) {
    layout.expert_degree = static_cast<int>(std::gcd<int64_t>(layout.moe_experts, layout.data_degree));
    if (layout.expert_degree != layout.data_degree)
      layout.notes.push_back(fmt::format("moe_experts={} do not shard over the {} data-parallel ranks: sharded over {}",
                                         layout.moe_experts, layout.data_degree, layout.expert_degree));
    if (layout.expert_degree == 1)
      layout.notes.push_back("moe_experts: every expert local to each rank, no all-to-all");
  }
  return layout;
}

nlohmann::json to_json(const ParallelLayout& layout) {
  return {{"world_size", layout.world_size},
          {"tensor_parallel_degree", layout.tensor_degree},
          {"data_parallel_degree", layout.data_degree},
          {"expert_parallel_degree", layout.expert_degree},
          {"sequence_parallel", layout.sequence_parallel},
          {"moe_experts", layout.moe_experts},
          {"notes", layout.notes}};
}

CommunicatorGroup::CommunicatorGroup(std::string name, std::unique_ptr<Communicator> comm)
    : name_(std::move(name)), comm_(std::move(comm)) {}

int CommunicatorGroup::rank() const { return comm_->rank(); }
int CommunicatorGroup::size() const { return comm_->world_size(); }

void CommunicatorGroup::all_reduce_sum(torch::Tensor& tensor, const std::string& op) {
  samples_.push_back(comm_->all_reduce_sum(tensor, label(op)));
}

torch::Tensor CommunicatorGroup::all_gather_rows(const torch::Tensor& in, const std::string& op) {
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape[0] *= size();
  torch::Tensor out = torch::empty(shape, in.options());
  samples_.push_back(comm_->all_gather_into(out, in.contiguous(), label(op)));
  return out;
}

torch::Tensor CommunicatorGroup::reduce_scatter_rows(const torch::Tensor& in, const std::string& op) {
  TORCH_CHECK(in.size(0) % size() == 0, "reduce_scatter_rows: ", in.size(0), " rows do not split over ", size());
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape[0] /= size();
  torch::Tensor out = torch::empty(shape, in.options());
  samples_.push_back(comm_->reduce_scatter(out, in.contiguous(), ReduceOp::sum, label(op)));
  return out;
}

torch::Tensor CommunicatorGroup::all_to_all_rows(const torch::Tensor& in, const std::vector<int64_t>& in_splits,
                                                 const std::vector<int64_t>& out_splits, const std::string& op) {
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape[0] = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
  torch::Tensor out = torch::empty(shape, in.options());
  samples_.push_back(comm_->all_to_all(out, in.contiguous(), out_splits, in_splits, label(op)));
  return out;
}

std::vector<CollectiveSample> CommunicatorGroup::take_samples() { return std::exchange(samples_, {}); }

ModelParallel Subgroups::model_parallel() const {
  ModelParallel parallel;
  parallel.tensor = tensor;
  parallel.expert = expert;
  parallel.sequence_parallel = sequence_parallel && tensor != nullptr;
  return parallel;
}

Subgroups make_subgroups(Communicator& world, const ParallelLayout& layout) {
  Subgroups groups;
  groups.sequence_parallel = layout.sequence_parallel;
  const int rank = world.rank();
  if (layout.tensor_degree > 1)
    groups.tensor = std::make_shared<CommunicatorGroup>("tp", world.split("tp", layout.tensor_group(rank)));
  if (layout.expert_degree > 1)
    groups.expert = std::make_shared<CommunicatorGroup>("ep", world.split("ep", layout.expert_group(rank)));
  return groups;
}

std::unique_ptr<Communicator> make_data_parallel_group(Communicator& world, const ParallelLayout& layout) {
  return world.split("dp", layout.data_group(world.rank()));
}

std::unique_ptr<Communicator> make_expert_data_parallel_group(Communicator& world, const ParallelLayout& layout) {
  if (layout.expert_degree == 1 || layout.expert_degree == layout.data_degree) return nullptr;
  return world.split("edp", layout.expert_data_group(world.rank()));
}

}  // namespace rcl
