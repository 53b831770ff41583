#include "rocm_conformance_llm/transport/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <future>
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

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

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

std::string describe(const RankHeartbeat& beat) {
  if (!beat.seen) return fmt::format("rank {} never published a heartbeat", beat.rank);
  return fmt::format("rank {} last entered collective #{} '{}' at step {}", beat.rank, beat.sequence,
                     beat.op, beat.step);
}

nlohmann::json to_json(const RankHeartbeat& beat) {
  return {{"rank", beat.rank}, {"seen", beat.seen}, {"step", beat.step},
          {"sequence", beat.sequence}, {"op", beat.op}};
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

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

}  // namespace

CollectiveError::CollectiveError(Finding finding)
    : std::runtime_error(finding.message), finding_(std::move(finding)) {}

double bus_bandwidth_gbps(CollectiveKind kind, int64_t bytes, double seconds, int world_size) {
  if (seconds <= 0 || world_size < 1) return 0.0;
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  const double n = world_size;
  switch (kind) {
    case CollectiveKind::all_reduce: return algbw * 2.0 * (n - 1) / n;
    case CollectiveKind::all_gather: return algbw * (n - 1) / n;
    case CollectiveKind::broadcast: return algbw;
  }
  return 0.0;
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
  std::chrono::milliseconds timeout{0};
  std::string store_address;  // "host:port", for messages
  std::string store_server;   // who serves it, for messages: "rank 0" or the launcher
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

  const c10::intrusive_ptr<C10dGroup>& group_for(const torch::Tensor& tensor) const {
    return tensor.is_cpu() ? host_group : group;
  }

  Finding failure(const std::string& signature, std::string message, nlohmann::json evidence) const {
    evidence["backend"] = backend;
    evidence["timeout_s"] = timeout_s();
    evidence["store"] = store_address;
    return Finding{component::rccl, signature, Severity::fail, step, rank, std::move(message),
                   std::move(evidence)};
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
    std::thread([store = store, world = world_size, result] { result->set_value(read_heartbeats_from(store, world)); })
        .detach();
    if (future.wait_for(std::min(timeout, kHeartbeatReadLimit)) != std::future_status::ready) return std::nullopt;
    return future.get();
  }

  // Who never reached collective #`seq` (0: the rendezvous), from the heartbeats, as a clause
  // for an error message; fills evidence with the heartbeats and the missing ranks.
  std::string absentees(int64_t seq, const std::string& verb, nlohmann::json& evidence) const {
    const auto beats = read_heartbeats_bounded();
    if (!beats && store_server == "rank 0" && rank == 0) {
      // Served by this very process: its server thread is stuck, typically reading a request a
      // stopped peer left half-sent (libtorch 1.13's server reads each request to its end).
      return fmt::format("the rendezvous store this rank serves at {} stopped answering (a peer stopped in the "
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
      all.push_back(to_json(beat));
      if (beat.rank != rank && (!beat.seen || beat.sequence < seq)) {
        missing.push_back(beat.rank);
        details.push_back(describe(beat));
      }
    }
    evidence["heartbeats"] = all;
    evidence["missing_ranks"] = missing;
    if (missing.empty()) return "every rank " + verb + ", so the transport itself stalled or failed";
    return fmt::format("rank{} {} never {} ({})", missing.size() > 1 ? "s" : "", fmt::join(missing, ","), verb,
                       fmt::join(details, "; "));
  }

  // Why collective #`seq` failed: who never entered it, or that everyone did and the
  // transport itself stalled.
  Finding diagnose(int64_t seq, const std::string& op, double elapsed_s, const std::string& error) const {
    const bool timed_out = elapsed_s >= 0.9 * timeout_s() || mentions_timeout(error);
    nlohmann::json evidence = {{"op", op}, {"sequence", seq}, {"elapsed_s", elapsed_s}, {"error", error}};
    std::string message = fmt::format("rank {}: collective #{} '{}' at step {} {} after {:.1f} s: {}", rank, seq,
                                      op, step, timed_out ? "timed out" : "failed", elapsed_s,
                                      absentees(seq, "entered it", evidence));
    if (!timed_out) message += " [" + first_line(error) + "]";
    return failure(timed_out ? "collective_timeout" : "collective_error", message, evidence);
  }

  // `on_device`: the tensors live on the training device (host tensors need no wait for it).
  // Kernels queued before the collective (backward, flattening) are not communication time.
  // ProcessGroupNCCL's wait() (RCCL's, NCCL's) only orders the current stream after the
  // collective, so where events can time, a DeviceInterval around it times it on the stream,
  // read when the step is published: no host
  // wait per gradient bucket, which would drain the queue the GPU works from. Otherwise (Gloo, whose wait blocks anyway;
  // libtorch 1.13) the device is drained first and the host clock times it.
  template <typename Start>
  CollectiveSample run(const std::string& op, CollectiveKind kind, int64_t bytes, bool on_device, Start&& start) {
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
      throw CollectiveError(diagnose(seq, op, seconds_since(started), e.what()));
    }
    const double seconds = seconds_since(started);
    CollectiveSample sample{op, bytes, seconds, bus_bandwidth_gbps(kind, bytes, seconds, world_size), seq};
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
  if (!device.is_cpu() && impl->backend == "gloo")
    spdlog::warn("rank {}: this {} libtorch has no c10d NCCL process group (RCCL on ROCm): collectives of "
                 "device tensors go through Gloo (they stress host copies, not RCCL)",
                 launch.rank, RCL_TORCH_BUILD);
  impl->timeout = timeout;
  impl->store_address = fmt::format("{}:{}", launch.master_addr, launch.master_port);
  const bool serve_store = launch.rank == 0 && !launch.launcher_store_prefix;
  impl->store_server = launch.launcher_store_prefix ? launch.launcher : "rank 0";

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
    throw CollectiveError(impl->failure(
        "rendezvous_failed",
        fmt::format("rank {} ({}): cannot {} the rendezvous store at {} within {:.0f} s: {}", launch.rank,
                    launch.launcher, serve_store ? "serve" : "reach", impl->store_address,
                    impl->timeout_s(), first_line(e.what())),
        {{"error", e.what()}}));
  }

  try {
    const auto group_store = [&](const std::string& prefix) {
      return c10::make_intrusive<c10d::PrefixStore>(prefix, impl->store);
    };
    // Each Gloo group gets its own options and transport device, as torch.distributed's do.
    const auto gloo_group = [&](const std::string& prefix) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(launch.master_addr));
      return c10::make_intrusive<c10d::ProcessGroupGloo>(group_store(prefix), launch.rank, launch.world_size,
                                                         options);
    };
    if (impl->backend == "gloo") {
      impl->group = gloo_group("pg");
    } else {
#if defined(RCL_HAVE_C10D_NCCL)
      impl->group = make_nccl_group(group_store("pg"), launch.rank, launch.world_size, timeout);
#endif
    }
    impl->host_group = impl->group;
    if (!device.is_cpu()) impl->host_group = gloo_group("pg-host");
  } catch (const std::exception& e) {
    // The group's rendezvous waits for every rank: name those that never published "join".
    nlohmann::json evidence = {{"error", e.what()}};
    const std::string who = impl->absentees(0, "joined", evidence);
    throw CollectiveError(impl->failure(
        "rendezvous_failed",
        fmt::format("rank {} ({}): {} group rendezvous through {} failed: {} [{}]", launch.rank, launch.launcher,
                    impl->backend, impl->store_address, who, first_line(e.what())),
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
  std::vector<at::Tensor> tensors{tensor};
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return impl_->run(op, CollectiveKind::all_reduce, bytes, !tensor.is_cpu(), [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    return impl_->group_for(tensor)->allreduce(tensors, options);
  });
}

torch::Tensor Communicator::all_gather(const torch::Tensor& tensor, const std::string& op,
                                       CollectiveSample* sample) {
  std::vector<at::Tensor> inputs{tensor.contiguous()};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < impl_->world_size; ++r) outputs[0].push_back(torch::empty_like(inputs[0]));
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size()) * impl_->world_size;
  CollectiveSample done = impl_->run(op, CollectiveKind::all_gather, bytes, !tensor.is_cpu(),
                                     [&] { return impl_->group_for(tensor)->allgather(outputs, inputs); });
  if (sample) *sample = done;
  return torch::stack(outputs[0]);
}

CollectiveSample Communicator::broadcast(torch::Tensor& tensor, int root, const std::string& op) {
  std::vector<at::Tensor> tensors{tensor};
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return impl_->run(op, CollectiveKind::broadcast, bytes, !tensor.is_cpu(), [&] {
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
        fmt::format("rank {}: store exchange '{}' at step {} failed after {:.1f} s: rank{} {} did not arrive [{}]",
                    d.rank, name, d.step, seconds_since(started), missing.size() > 1 ? "s" : "",
                    missing.empty() ? std::string("(unknown)") : fmt::format("{}", fmt::join(missing, ",")),
                    first_line(e.what())),
        {{"exchange", name}, {"missing_ranks", missing}, {"error", e.what()}}));
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
  return impl_->read_heartbeats();
}

}  // namespace rcl
