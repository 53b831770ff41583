// The heartbeats each rank publishes in the rendezvous store, and the failure findings built
// from them: apart from the collectives, since they must work when the collectives no longer do.
#include "rocm_conformance_llm/transport/communicator_impl.hpp"

#include <algorithm>
#include <future>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }

// Reading every rank's heartbeat from a healthy store takes milliseconds.
constexpr std::chrono::milliseconds kHeartbeatReadLimit{5000};

bool mentions_timeout(const std::string& error) {
  const std::string lower = to_lower(error);
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// `who`: the rank as messages name it (world rank, and the group-local index in a subgroup).
std::string describe(const RankHeartbeat& beat, const std::string& who) {
  if (!beat.seen) return fmt::format("{} never published a heartbeat", who);
  return fmt::format("{} last entered collective #{} '{}' at step {}", who, beat.sequence, beat.op, beat.step);
}

nlohmann::json to_json(const RankHeartbeat& beat, int world_rank) {
  return {{"rank", beat.rank}, {"world_rank", world_rank},  {"seen", beat.seen},
          {"step", beat.step}, {"sequence", beat.sequence}, {"op", beat.op}};
}

}  // namespace

Finding Communicator::Impl::failure(const std::string& signature, std::string message, nlohmann::json evidence) const {
  evidence["backend"] = backend;
  evidence["timeout_s"] = timeout_s();
  evidence["store"] = store_address;
  return Finding{component::rccl,     signature,          Severity::fail,     step,
                 world_rank_of(rank), std::move(message), std::move(evidence)};
}

void Communicator::Impl::publish_heartbeat(const std::string& op) {
  store->set(heartbeat_key(rank), to_bytes(fmt::format("{} {} {}", step, sequence, op)));
}

std::optional<std::vector<RankHeartbeat>> Communicator::Impl::read_heartbeats_from(
    const c10::intrusive_ptr<c10d::Store>& store, int world_size) {
  std::vector<RankHeartbeat> beats(world_size);
  try {
    for (int r = 0; r < world_size; ++r) {
      beats[r].rank = r;
      const std::string key = heartbeat_key(r);
      if (!store->check({key})) continue;  // get() would block until the key appears
      std::istringstream in(from_bytes(store->get(key)));
      beats[r].seen = static_cast<bool>(in >> beats[r].step >> beats[r].sequence >> beats[r].op);
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return beats;
}

std::optional<std::vector<RankHeartbeat>> Communicator::Impl::read_heartbeats_bounded() const {
  auto result = std::make_shared<std::promise<std::optional<std::vector<RankHeartbeat>>>>();
  auto future = result->get_future();
  std::thread([store = store, world = world_size, result] {
    result->set_value(read_heartbeats_from(store, world));
  }).detach();
  if (future.wait_for(std::min(timeout, kHeartbeatReadLimit)) != std::future_status::ready) return std::nullopt;
  return future.get();
}

std::string Communicator::Impl::ranks_clause(const std::vector<int>& group_ranks) const {
  std::string text =
      fmt::format("rank{} {}", group_ranks.size() > 1 ? "s" : "", fmt::join(world_ranks_of(group_ranks), ","));
  if (is_subgroup())
    text += fmt::format(" (group rank{} {})", group_ranks.size() > 1 ? "s" : "", fmt::join(group_ranks, ","));
  return text;
}

std::string Communicator::Impl::absentees(int64_t seq, const std::string& verb, nlohmann::json& evidence) const {
  const auto beats = read_heartbeats_bounded();
  if (!beats && store_server == "rank 0" && rank == 0) {
    // Served by this very process: its server thread is stuck, typically reading a request a
    // stopped peer left half-sent (libtorch 1.13's server reads each request to its end).
    return fmt::format(
        "the rendezvous store this rank serves at {} stopped answering (a peer stopped in the "
        "middle of a store request?)",
        store_address);
  }
  if (!beats) {
    return fmt::format("the rendezvous store at {} (served by {}) is unreachable, so {} is likely gone", store_address,
                       store_server, store_server);
  }
  std::vector<int> missing;
  std::vector<std::string> details;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& beat : *beats) {
    all.push_back(to_json(beat, world_rank_of(beat.rank)));
    if (beat.rank != rank && (!beat.seen || beat.sequence < seq)) {
      missing.push_back(beat.rank);
      details.push_back(describe(beat, who(beat.rank)));
    }
  }
  evidence["heartbeats"] = all;
  evidence["missing_ranks"] = missing;  // group ranks (the world's: world ranks), as ever
  evidence["missing_world_ranks"] = world_ranks_of(missing);
  if (missing.empty()) return "every rank " + verb + ", so the transport itself stalled or failed";
  return fmt::format("{} never {} ({})", ranks_clause(missing), verb, fmt::join(details, "; "));
}

Finding Communicator::Impl::diagnose(int64_t seq, const std::string& op, CollectiveKind kind, double elapsed_s,
                                     const std::string& error) const {
  const bool timed_out = elapsed_s >= 0.9 * timeout_s() || mentions_timeout(error);
  nlohmann::json evidence = {{"op", op},        {"kind", to_string(kind)}, {"group", group_name},
                             {"sequence", seq}, {"elapsed_s", elapsed_s},  {"error", error}};
  std::string message = fmt::format(
      "{}: collective #{} '{}' ({} in group '{}' of {} ranks) at step {} {} after "
      "{:.1f} s: {}",
      who(rank), seq, op, to_string(kind), group_name, world_size, step, timed_out ? "timed out" : "failed", elapsed_s,
      absentees(seq, "entered it", evidence));
  if (!timed_out) message += " [" + first_line(error) + "]";
  return failure(timed_out ? "collective_timeout" : "collective_error", message, evidence);
}

std::optional<std::vector<RankHeartbeat>> Communicator::read_heartbeats() const {
  return impl_->read_heartbeats_bounded();
}

}  // namespace rcl
