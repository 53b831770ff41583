// Joining a world or a subgroup: the TCPStore rendezvous, the Gloo / c10d NCCL groups made over
// it, and the findings that name who never joined. Apart from the collectives that use them.
#include "rocm_conformance_llm/transport/communicator_impl.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

// libtorch is built with Gloo; its header hides behind the build's own flag.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

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

}  // namespace

void Communicator::Impl::make_groups(const c10::intrusive_ptr<c10d::Store>& over) {
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

std::string collective_backend(const torch::Device& device) {
#if defined(RCL_HAVE_C10D_NCCL)
  // One process group, two names: a ROCm libtorch builds ProcessGroupNCCL against RCCL.
  if (!device.is_cpu()) return std::string(RCL_TORCH_BUILD) == "rocm" ? "rccl" : "nccl";
#endif
  (void)device;
  return "gloo";
}

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

}  // namespace rcl
