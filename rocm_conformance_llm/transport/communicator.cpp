#include "rocm_conformance_llm/transport/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <torch/cuda.h>
#include <torch/version.h>

// libtorch is built with Gloo; its header hides behind the build's own flag.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "rocm_conformance_llm/base/deferred_scalars.hpp"
#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/host_reads.hpp"
#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/transport/c10d_group.hpp"

namespace rcl {
namespace {

using Clock = SteadyClock;

std::vector<uint8_t> to_bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string from_bytes(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }

// Reading every rank's heartbeat from a healthy store takes milliseconds.
constexpr std::chrono::milliseconds kHeartbeatReadLimit{5000};

bool mentions_timeout(const std::string& error) {
  const std::string lower = to_lower(error);
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// libtorch 2.x's TCPStoreOptions has `useLibUV`, true by default, but a libtorch built without
// libuv (Debian's) refuses it ("use_libuv was requested but PyTorch was built without libuv
// support"), and the query for it (c10d::detail::is_libuv_tcpstore_backend_available) is not
// exported. So: where the field exists, try the build's default; if the build says it has no
// libuv, use the classic backend from then on. The check precedes any socket work, so the retry
// is clean. USE_LIBUV=0 asks for the classic backend, as it does of torch.distributed. Older
// libtorch (1.13) has no such field and no retry.
template <typename Options>
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, Options options) {
  if constexpr (requires { options.useLibUV; }) {
    static std::atomic<bool> libuv_missing{false};
    const char* use_libuv = std::getenv("USE_LIBUV");
    if (libuv_missing.load() || (use_libuv != nullptr && std::string(use_libuv) == "0")) options.useLibUV = false;
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const std::exception& e) {
      if (!options.useLibUV || to_lower(e.what()).find("without libuv") == std::string::npos) throw;
      libuv_missing.store(true);
      options.useLibUV = false;
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(host, options);
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

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

// Gloo's TCP transport binds the address it announces to peers. GLOO_SOCKET_IFNAME picks the
// NIC (as in torch.distributed); a loopback rendezvous means one host, so bind loopback;
// otherwise the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

int64_t byte_size(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return c10d::ReduceOp::SUM;
    case ReduceOp::avg: return c10d::ReduceOp::AVG;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    case ReduceOp::max: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// `t` as the route puts it on the wire: a view of its bits, a converted copy, or `t` itself.
// A view writes through to `t`; a copy must be copied back (back_from_wire).
torch::Tensor on_wire(const torch::Tensor& t, const CollectiveRoute& route) {
  if (!route.carried_as) return t;
  if (route.reinterpreted) {
    TORCH_CHECK(t.is_contiguous(), "a tensor carried as its bits must be contiguous");
    return t.view(*route.carried_as);
  }
  return t.to(*route.carried_as);
}

// After the collective: AVG emulated as SUM divides here (integers truncate, as RCCL's do), and
// a converted copy goes back into `t`.
void back_from_wire(torch::Tensor& wire, torch::Tensor& t, const CollectiveRoute& route, int world_size) {
  if (route.sum_then_divide) {
    if (c10::isIntegralType(wire.scalar_type(), /*includeBool=*/false)) wire.div_(world_size, "trunc");
    else wire.div_(world_size);
  }
  if (!wire.is_same(t) && !route.reinterpreted) t.copy_(wire.view_as(t));
}

}  // namespace

CollectiveError::CollectiveError(Finding finding) : std::runtime_error(finding.message), finding_(std::move(finding)) {}

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

  Finding failure(const std::string& signature, std::string message, nlohmann::json evidence) const {
    evidence["backend"] = backend;
    evidence["timeout_s"] = timeout_s();
    evidence["store"] = store_address;
    return Finding{component::rccl,     signature,          Severity::fail,     step,
                   world_rank_of(rank), std::move(message), std::move(evidence)};
  }

  void publish_heartbeat(const std::string& op) {
    store->set(heartbeat_key(rank), to_bytes(fmt::format("{} {} {}", step, sequence, op)));
  }

  std::optional<std::vector<RankHeartbeat>> read_heartbeats() const { return read_heartbeats_from(store, world_size); }

  static std::optional<std::vector<RankHeartbeat>> read_heartbeats_from(const c10::intrusive_ptr<c10d::Store>& store,
                                                                        int world_size) {
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

  // The heartbeats, read on a helper thread that is given at most kHeartbeatReadLimit (or the
  // timeout, when shorter): a store server blocked by a stopped peer would otherwise hold this
  // rank for another full timeout. The helper owns a reference to the store, so it may outlive
  // this object.
  std::optional<std::vector<RankHeartbeat>> read_heartbeats_bounded() const {
    auto result = std::make_shared<std::promise<std::optional<std::vector<RankHeartbeat>>>>();
    auto future = result->get_future();
    std::thread([store = store, world = world_size, result] {
      result->set_value(read_heartbeats_from(store, world));
    }).detach();
    if (future.wait_for(std::min(timeout, kHeartbeatReadLimit)) != std::future_status::ready) return std::nullopt;
    return future.get();
  }

  // "rank 3" / "ranks 1,3" in world ranks, then the group ranks in a subgroup.
  std::string ranks_clause(const std::vector<int>& group_ranks) const {
    std::string text =
        fmt::format("rank{} {}", group_ranks.size() > 1 ? "s" : "", fmt::join(world_ranks_of(group_ranks), ","));
    if (is_subgroup())
      text += fmt::format(" (group rank{} {})", group_ranks.size() > 1 ? "s" : "", fmt::join(group_ranks, ","));
    return text;
  }

  // Who never reached collective #`seq` (0: the rendezvous), from the heartbeats, as a clause
  // for an error message; fills evidence with the heartbeats and the missing ranks.
  std::string absentees(int64_t seq, const std::string& verb, nlohmann::json& evidence) const {
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
      return fmt::format("the rendezvous store at {} (served by {}) is unreachable, so {} is likely gone",
                         store_address, store_server, store_server);
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

  // Why collective #`seq` failed: who never entered it, or that everyone did and the
  // transport itself stalled.
  Finding diagnose(int64_t seq, const std::string& op, CollectiveKind kind, double elapsed_s,
                   const std::string& error) const {
    const bool timed_out = elapsed_s >= 0.9 * timeout_s() || mentions_timeout(error);
    nlohmann::json evidence = {{"op", op},        {"kind", to_string(kind)}, {"group", group_name},
                               {"sequence", seq}, {"elapsed_s", elapsed_s},  {"error", error}};
    std::string message = fmt::format(
        "{}: collective #{} '{}' ({} in group '{}' of {} ranks) at step {} {} after "
        "{:.1f} s: {}",
        who(rank), seq, op, to_string(kind), group_name, world_size, step, timed_out ? "timed out" : "failed",
        elapsed_s, absentees(seq, "entered it", evidence));
    if (!timed_out) message += " [" + first_line(error) + "]";
    return failure(timed_out ? "collective_timeout" : "collective_error", message, evidence);
  }

  // The device group (Gloo, or c10d's NCCL group by capability) and the host tensors' Gloo group
  // of this rank and world_size, rendezvousing under `over` (the world's store, or a subgroup's
  // prefix of it).
  void make_groups(const c10::intrusive_ptr<c10d::Store>& over) {
    const auto group_store = [&](const std::string& prefix) {
      return c10::make_intrusive<c10d::PrefixStore>(prefix, over);
    };
    // Each Gloo group gets its own options and transport device, as torch.distributed's do.
    const auto gloo_group = [&](const std::string& prefix) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(master_addr));
      return c10::make_intrusive<c10d::ProcessGroupGloo>(group_store(prefix), rank, world_size, options);
    };
    if (backend == "gloo") {
      group = gloo_group("pg");
    } else {
#if defined(RCL_HAVE_C10D_NCCL)
      group = make_nccl_group(group_store("pg"), rank, world_size, timeout);
#endif
    }
    host_group = group;
    if (!device.is_cpu()) host_group = gloo_group("pg-host");
  }

  // `on_device`: the tensors live on the training device (host tensors need no wait for it).
  // Kernels queued before the collective (backward, flattening) are not communication time.
  // ProcessGroupNCCL's wait() (RCCL's, NCCL's) only orders the current stream after the
  // collective, so where events can time, a DeviceInterval around it times it on the stream,
  // read when the step is published: no host
  // wait per gradient bucket, which would drain the queue the GPU works from. Otherwise (Gloo, whose wait blocks
  // anyway; libtorch 1.13) the device is drained first and the host clock times it. `tensor` (the caller's, before any
  // wire conversion) gives the sample its dtype and where it lives.
  template <typename Start>
  CollectiveSample run(const std::string& op, CollectiveKind kind, std::optional<ReduceOp> reduce,
                       const torch::Tensor& tensor, int64_t bytes, Start&& start) {
    const bool on_device = !tensor.is_cpu();
    const int64_t seq = ++sequence;
    std::optional<c10::DeviceGuard> guard;
    std::shared_ptr<DeviceInterval> on_stream;
    if (on_device && !device.is_cpu()) {
      guard.emplace(device);
      if (backend != "gloo" && DeviceInterval::available()) {
        on_stream = std::make_shared<DeviceInterval>(device);
      } else {
        note_device_wait();
        torch::cuda::synchronize(device.has_index() ? device.index() : -1);
      }
    }
    const auto started = Clock::now();
    try {
      publish_heartbeat(op);
      auto work = start();
      work->wait(timeout);
    } catch (const std::exception& e) {
      throw CollectiveError(diagnose(seq, op, kind, seconds_since(started), e.what()));
    }
    const double seconds = seconds_since(started);
    CollectiveSample sample{.op = op,
                            .bytes = bytes,
                            .seconds = seconds,
                            .bus_bandwidth_gbps = bus_bandwidth_gbps(kind, bytes, seconds, world_size),
                            .sequence = seq,
                            .kind = to_string(kind),
                            .reduce_op = reduce ? to_string(*reduce) : "",
                            .dtype = c10::toString(tensor.scalar_type()),
                            .group = group_label};
    if (on_stream) {
      on_stream->stop();
      sample.settle = settle_on_device_time([on_stream] { return on_stream->seconds(); }, seconds, kind, world_size);
    }
    return sample;
  }
};

std::string collective_backend(const torch::Device& device) {
#if defined(RCL_HAVE_C10D_NCCL)
  // One process group, two names: a ROCm libtorch builds ProcessGroupNCCL against RCCL.
  if (!device.is_cpu()) return std::string(RCL_TORCH_BUILD) == "rocm" ? "rccl" : "nccl";
#endif
  (void)device;
  return "gloo";
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::connect(const LaunchInfo& launch, const torch::Device& device,
                                                    std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->rank = launch.rank;
  impl->world_size = launch.world_size;
  impl->device = device;
  impl->backend = collective_backend(device);
  for (int r = 0; r < launch.world_size; ++r) impl->world_ranks.push_back(r);
  if (!device.is_cpu() && impl->backend == "gloo")
    spdlog::warn(
        "rank {}: this {} libtorch has no c10d NCCL process group (RCCL on ROCm): collectives of "
        "device tensors go through Gloo (they stress host copies, not RCCL)",
        launch.rank, RCL_TORCH_BUILD);
  impl->timeout = timeout;
  impl->store_address = fmt::format("{}:{}", launch.master_addr, launch.master_port);
  const bool serve_store = launch.rank == 0 && !launch.launcher_store_prefix;
  impl->store_server = launch.launcher_store_prefix ? launch.launcher : "rank 0";
  impl->master_addr = launch.master_addr;

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(launch.master_port);
  store_options.isServer = serve_store;
  store_options.numWorkers = static_cast<std::size_t>(launch.world_size);
  store_options.waitWorkers = false;  // the group's own rendezvous waits, and names who is missing
  store_options.timeout = timeout;
  try {
    impl->store = make_tcp_store(launch.master_addr, store_options);
    if (launch.launcher_store_prefix)
      impl->store = c10::make_intrusive<c10d::PrefixStore>(*launch.launcher_store_prefix, impl->store);
    impl->publish_heartbeat("join");
  } catch (const std::exception& e) {
    throw CollectiveError(
        impl->failure("rendezvous_failed",
                      fmt::format("rank {} ({}): cannot {} the rendezvous store at {} within {:.0f} s: {}", launch.rank,
                                  launch.launcher, serve_store ? "serve" : "reach", impl->store_address,
                                  impl->timeout_s(), first_line(e.what())),
                      {{"error", e.what()}}));
  }

  try {
    impl->make_groups(impl->store);
  } catch (const std::exception& e) {
    // The group's rendezvous waits for every rank: name those that never published "join".
    nlohmann::json evidence = {{"error", e.what()}};
    const std::string who = impl->absentees(0, "joined", evidence);
    throw CollectiveError(
        impl->failure("rendezvous_failed",
                      fmt::format("rank {} ({}): {} group rendezvous through {} failed: {} [{}]", launch.rank,
                                  launch.launcher, impl->backend, impl->store_address, who, first_line(e.what())),
                      evidence));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

std::unique_ptr<Communicator> Communicator::split(const std::string& name, const std::vector<int>& ranks) {
  const Impl& world = *impl_;
  const auto me = std::find(ranks.begin(), ranks.end(), world.rank);
  TORCH_CHECK(me != ranks.end(), "split: rank ", world.rank, " is not in group '", name, "'");
  auto impl = std::make_unique<Impl>();
  impl->rank = static_cast<int>(me - ranks.begin());
  impl->world_size = static_cast<int>(ranks.size());
  impl->device = world.device;
  impl->backend = world.backend;
  impl->group_name = fmt::format("{} (world ranks {})", name, fmt::join(ranks, ","));
  impl->group_label = name;
  impl->world_ranks = ranks;
  impl->timeout = world.timeout;
  impl->store_address = world.store_address;
  impl->store_server = world.store_server;
  impl->master_addr = world.master_addr;
  // The members' own keys (heartbeats by group rank, the groups' rendezvous) under one prefix
  // per member set, so groups of the same kind never meet.
  impl->store =
      c10::make_intrusive<c10d::PrefixStore>(fmt::format("group/{}/{}", name, fmt::join(ranks, "_")), world.store);
  try {
    impl->publish_heartbeat("join");
    impl->make_groups(impl->store);
  } catch (const std::exception& e) {
    nlohmann::json evidence = {{"error", e.what()}, {"group", impl->group_name}};
    const std::string who = impl->absentees(0, "joined", evidence);
    throw CollectiveError(
        impl->failure("rendezvous_failed",
                      fmt::format("{}: {} subgroup '{}' rendezvous through {} failed: {} [{}]", impl->who(impl->rank),
                                  impl->backend, impl->group_name, impl->store_address, who, first_line(e.what())),
                      evidence));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world_size; }
const torch::Device& Communicator::device() const { return impl_->device; }
const std::string& Communicator::backend() const { return impl_->backend; }
int64_t Communicator::sequence() const { return impl_->sequence; }
int64_t Communicator::step() const { return impl_->step; }
void Communicator::set_step(int64_t step) { impl_->step = step; }

CollectiveSample Communicator::all_reduce_sum(torch::Tensor& tensor, const std::string& op) {
  return all_reduce(tensor, ReduceOp::sum, op);
}

CollectiveSample Communicator::all_reduce(torch::Tensor& tensor, ReduceOp reduce, const std::string& op) {
  const CollectiveRoute route = impl_->route(CollectiveKind::all_reduce, reduce, tensor);
  std::vector<at::Tensor> tensors{on_wire(tensor, route)};
  CollectiveSample sample = impl_->run(op, CollectiveKind::all_reduce, reduce, tensor, byte_size(tensor), [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(route.sum_then_divide ? ReduceOp::sum : reduce);
    return impl_->group_for(tensor)->allreduce(tensors, options);
  });
  back_from_wire(tensors[0], tensor, route, impl_->world_size);
  return sample;
}

torch::Tensor Communicator::all_gather(const torch::Tensor& tensor, const std::string& op, CollectiveSample* sample) {
  const torch::Tensor in = tensor.contiguous();
  std::vector<int64_t> shape{impl_->world_size};
  shape.insert(shape.end(), in.sizes().begin(), in.sizes().end());
  torch::Tensor out = torch::empty(shape, in.options());
  CollectiveSample done = all_gather_into(out, in, op);
  if (sample) *sample = done;
  return out;
}

CollectiveSample Communicator::all_gather_into(torch::Tensor& out, const torch::Tensor& in, const std::string& op) {
  const int64_t numel = in.numel();
  TORCH_CHECK(out.is_contiguous() && out.numel() == numel * impl_->world_size && out.dtype() == in.dtype(),
              "all_gather_into: the output must be contiguous, of the input's dtype, world_size x its size");
  const CollectiveRoute route = impl_->route(CollectiveKind::all_gather, ReduceOp::sum, in);
  std::vector<at::Tensor> inputs{on_wire(in.contiguous(), route).reshape(-1)};
  torch::Tensor received = on_wire(out, route).view(-1);  // data movement only: a view, written through
  return impl_->run(op, CollectiveKind::all_gather, std::nullopt, in, byte_size(out), [&] {
    if (route.native) return impl_->group_for(in)->_allgather_base(received, inputs[0]);
    // Gloo 1.13: the list form, whose outputs are views of `out` (Gloo copies each rank's part in).
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < impl_->world_size; ++r) outputs[0].push_back(received.narrow(0, r * numel, numel));
    return impl_->group_for(in)->allgather(outputs, inputs);
  });
}

CollectiveSample Communicator::reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp reduce,
                                              const std::string& op) {
  const int64_t numel = out.numel();
  TORCH_CHECK(out.is_contiguous() && in.numel() == numel * impl_->world_size && out.dtype() == in.dtype(),
              "reduce_scatter: the output must be contiguous, of the input's dtype, 1/world_size of its size");
  const CollectiveRoute route = impl_->route(CollectiveKind::reduce_scatter, reduce, in);
  if (route.native) {
    torch::Tensor input = in.contiguous().view(-1);
    torch::Tensor output = out.view(-1);
    return impl_->run(op, CollectiveKind::reduce_scatter, reduce, in, byte_size(in), [&] {
      c10d::ReduceScatterOptions options;
      options.reduceOp = to_c10d(reduce);
      return impl_->group_for(in)->_reduce_scatter_base(output, input, options);
    });
  }
  // Emulated: the whole input all-reduced (a copy: the caller's input stays as it was), then
  // this rank's chunk. Moves world_size x the data of a real reduce-scatter; the sample's bus
  // bandwidth is still counted on reduce-scatter's bytes, so Gloo's figure reads low.
  std::vector<at::Tensor> whole{route.carried_as ? in.to(*route.carried_as).reshape(-1)
                                                 : in.reshape(-1).clone(at::MemoryFormat::Contiguous)};
  CollectiveSample sample = impl_->run(op, CollectiveKind::reduce_scatter, reduce, in, byte_size(in), [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(route.sum_then_divide ? ReduceOp::sum : reduce);
    return impl_->group_for(in)->allreduce(whole, options);
  });
  torch::Tensor mine = whole[0].narrow(0, impl_->rank * numel, numel);
  CollectiveRoute copied_back = route;
  copied_back.reinterpreted = false;  // `mine` is always a separate buffer: copy it into `out`
  back_from_wire(mine, out, copied_back, impl_->world_size);
  return sample;
}

CollectiveSample Communicator::all_to_all(torch::Tensor& out, const torch::Tensor& in,
                                          const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                                          const std::string& op) {
  TORCH_CHECK(out.is_contiguous(), "all_to_all: the output must be contiguous");
  const CollectiveRoute route = impl_->route(CollectiveKind::all_to_all, ReduceOp::sum, in);
  torch::Tensor input = on_wire(in.contiguous(), route);
  torch::Tensor output = on_wire(out, route);  // data movement only: a view, written through
  std::vector<int64_t> send = in_splits, receive = out_splits;
  return impl_->run(op, CollectiveKind::all_to_all, std::nullopt, in, byte_size(in), [&] {
    return impl_->group_for(in)->alltoall_base(output, input, receive, send, c10d::AllToAllOptions());
  });
}

torch::Tensor Communicator::all_to_all_uneven(const torch::Tensor& in, const std::vector<int64_t>& in_splits,
                                              const std::string& op, std::vector<CollectiveSample>* samples) {
  const int world = impl_->world_size;
  TORCH_CHECK(static_cast<int>(in_splits.size()) == world, "all_to_all_uneven: one split per rank");
  // The counts first, as MoE dispatch does: each rank learns how many rows every peer sends it.
  torch::Tensor counts = torch::tensor(in_splits, torch::kLong).to(in.device());
  torch::Tensor received_counts = torch::empty_like(counts);
  const std::vector<int64_t> ones(world, 1);
  CollectiveSample counted = all_to_all(received_counts, counts, ones, ones, op + "_counts");
  const torch::Tensor host_counts = received_counts.cpu();
  const std::vector<int64_t> out_splits(host_counts.data_ptr<int64_t>(), host_counts.data_ptr<int64_t>() + world);
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape[0] = 0;
  for (const int64_t rows : out_splits) shape[0] += rows;
  torch::Tensor out = torch::empty(shape, in.options());
  CollectiveSample moved = all_to_all(out, in, out_splits, in_splits, op);
  if (samples) {
    samples->push_back(std::move(counted));
    samples->push_back(std::move(moved));
  }
  return out;
}

CollectiveSample Communicator::broadcast(torch::Tensor& tensor, int root, const std::string& op) {
  const CollectiveRoute route = impl_->route(CollectiveKind::broadcast, ReduceOp::sum, tensor);
  std::vector<at::Tensor> tensors{on_wire(tensor, route)};  // data movement only: a view, written through
  return impl_->run(op, CollectiveKind::broadcast, std::nullopt, tensor, byte_size(tensor), [&] {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return impl_->group_for(tensor)->broadcast(tensors, options);
  });
}

// Rank 0 gathers the values and publishes them under one key: O(world) store requests per
// exchange rather than O(world^2), which matters with hundreds of ranks on one store server.
std::vector<int64_t> Communicator::exchange_through_store(const std::string& name, int64_t value) {
  Impl& d = *impl_;
  const std::string prefix = "exchange/" + name + "/";
  std::vector<std::string> keys;
  for (int r = 0; r < d.world_size; ++r) keys.push_back(prefix + std::to_string(r));
  const std::string combined_key = prefix + "all";
  const auto started = Clock::now();
  std::string combined;
  try {
    d.store->set(keys[d.rank], to_bytes(std::to_string(value)));
    if (d.rank == 0) {
      d.store->wait(keys, d.timeout);
      for (const auto& key : keys) combined += from_bytes(d.store->get(key)) + " ";
      d.store->set(combined_key, to_bytes(combined));
      for (const auto& key : keys) d.store->deleteKey(key);
    } else {
      d.store->wait({combined_key}, d.timeout);
      combined = from_bytes(d.store->get(combined_key));
    }
  } catch (const std::exception& e) {
    // Whose value never came; with every value in, rank 0 itself stopped before publishing.
    std::vector<int> missing;
    try {
      for (int r = 0; r < d.world_size; ++r) {
        if (!d.store->check({keys[r]})) missing.push_back(r);
      }
      if (missing.empty()) missing.push_back(0);
    } catch (const std::exception&) {
      // The store itself is gone: `error` below says so.
    }
    throw CollectiveError(d.failure(
        "exchange_timeout",
        fmt::format("{}: store exchange '{}' at step {} failed after {:.1f} s: {} did not arrive [{}]", d.who(d.rank),
                    name, d.step, seconds_since(started),
                    missing.empty() ? std::string("rank (unknown)") : d.ranks_clause(missing), first_line(e.what())),
        {{"exchange", name},
         {"missing_ranks", missing},
         {"missing_world_ranks", d.world_ranks_of(missing)},
         {"error", e.what()}}));
  }
  std::vector<int64_t> values;
  std::istringstream in(combined);
  for (int64_t v = 0; in >> v;) values.push_back(v);
  // The last rank to read removes the combined key, so long runs do not grow the store.
  try {
    if (d.store->add(prefix + "done", 1) == d.world_size) {
      d.store->deleteKey(combined_key);
      d.store->deleteKey(prefix + "done");
    }
  } catch (const std::exception&) {
    // Cleanup only; the values are already read.
  }
  return values;
}

std::optional<std::vector<RankHeartbeat>> Communicator::read_heartbeats() const {
  return impl_->read_heartbeats_bounded();
}

std::chrono::milliseconds Communicator::timeout() const { return impl_->timeout; }

namespace {
std::string record_key(const std::string& name, int rank) { return fmt::format("record/{}/{}", name, rank); }

// `work` on a helper thread that owns what it uses, given at most `limit`: a store blocked by a
// stopped peer must not hold the caller. nullopt when it did not finish in time.
template <typename T>
std::optional<T> within_limit(std::chrono::milliseconds limit, std::function<T()> work) {
  auto result = std::make_shared<std::promise<T>>();
  auto future = result->get_future();
  std::thread([work = std::move(work), result] {
    try {
      result->set_value(work());
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (future.wait_for(limit) != std::future_status::ready) return std::nullopt;
  try {
    return future.get();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}
}  // namespace

bool Communicator::put_record(const std::string& name, const std::string& value, std::chrono::milliseconds limit) {
  const std::string key = record_key(name, impl_->world_rank_of(impl_->rank));
  const auto done = within_limit<bool>(limit, [store = impl_->store, key, value] {
    store->set(key, to_bytes(value));
    return true;
  });
  return done.value_or(false);
}

std::vector<std::optional<std::string>> Communicator::collect_records(const std::string& name,
                                                                      std::chrono::milliseconds limit,
                                                                      const std::vector<int>& only) const {
  using Records = std::vector<std::optional<std::string>>;
  const int world = static_cast<int>(impl_->world_ranks.size());
  std::vector<int> wanted = only;
  if (wanted.empty())
    for (int r = 0; r < world; ++r) wanted.push_back(r);
  // What arrived so far, shared with the helper: a store that stops answering mid-way still
  // leaves the records already read.
  auto got = std::make_shared<std::pair<std::mutex, Records>>();
  got->second.resize(world);
  const auto deadline = Clock::now() + limit;
  within_limit<bool>(limit, [store = impl_->store, name, wanted, got, deadline] {
    for (;;) {
      bool all = true;
      for (const int r : wanted) {
        {
          std::lock_guard<std::mutex> lock(got->first);
          if (got->second[r]) continue;
        }
        const std::string key = record_key(name, r);
        if (store->check({key})) {
          std::string value = from_bytes(store->get(key));
          std::lock_guard<std::mutex> lock(got->first);
          got->second[r] = std::move(value);
        } else {
          all = false;
        }
      }
      if (all || Clock::now() >= deadline) return all;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::lock_guard<std::mutex> lock(got->first);
  return got->second;
}

}  // namespace rcl
