// The network a distributed run is about to use, checked before anything is written: the
// interfaces the socket variables name, the address Gloo will announce for this host, and the
// rendezvous host answering. A network misconfiguration is then a usage error (exit 2) naming the
// host and the fix, not an RCCL rendezvous_failed after the collective timeout.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/transport/launch.hpp"

namespace rcl {

struct NetInterface {
  std::string name;
  bool up = false;
  bool loopback = false;
  std::vector<std::string> addresses;  // numeric IPv4 / IPv6 addresses on it
  bool running = false;                // IFF_RUNNING: up with a link (a carrier)
};

// This host's interfaces (getifaddrs), one entry per name.
std::vector<NetInterface> list_interfaces();

// The interfaces NCCL/RCCL would consider under NCCL_SOCKET_IFNAME=`spec`: a comma list of name
// prefixes, "=" before the list for exact names, "^" before it (and before "=") to exclude them.
std::vector<std::string> nccl_interfaces(const std::string& spec, const std::vector<NetInterface>& interfaces);

// "127.0.0.1", "::1", "::ffff:127.0.1.1": addresses only this host can reach.
bool is_loopback_address(const std::string& numeric);

// The address Gloo announces for `host`: the first of getaddrinfo's answers this process can bind
// (what Gloo binds); nullopt when none resolves or binds (Gloo then falls back to loopback).
std::optional<std::string> gloo_address_of(const std::string& host);

// Whether the world spans several hosts, and the evidence ("LOCAL_WORLD_SIZE=2 < WORLD_SIZE=4");
// nullopt when nothing says so. `is_local_host`: whether a host name or address is this machine's.
std::optional<std::string> spans_hosts(const LaunchInfo& launch, const EnvLookup& env,
                                       const std::function<bool(const std::string&)>& is_local_host);

// One TCP connect to host:port, tried until it succeeds or `wait` has passed.
bool tcp_answers(const std::string& host, int port, std::chrono::milliseconds wait);

// What one TCP connect to host:port met within `wait`: a listener; a refusal (the host is up and
// reachable, nothing listens on the port: the process that served it is gone); or silence (the
// host down, or the path to it cut: from one side the two look the same).
enum class TcpProbe { answers, refused, silent };
TcpProbe tcp_probe(const std::string& host, int port, std::chrono::milliseconds wait);

// The non-loopback interfaces of `interfaces` when every one of them is without a link (down, or
// up with no carrier): this host's own network is cut. Empty when any has a link, or there is none.
std::vector<std::string> cut_links(const std::vector<NetInterface>& interfaces);

// The network variables in effect (GLOO_*, NCCL_*, RCCL_*, MASTER_ADDR/PORT, ...), by name.
nlohmann::json network_variables(const std::vector<std::pair<std::string, std::string>>& environment);

// Throws ConfigError naming the host and the fix for: a socket interface variable naming no usable
// interface here, this host's name announcing a loopback address (or none) in a world that spans
// hosts, and a rendezvous host that does not answer within `rendezvous_timeout`. `backend` is
// collective_backend(device): NCCL_SOCKET_IFNAME matters only to "nccl"/"rccl". Returns the record
// for config.json (`network`).
nlohmann::json check_network(const LaunchInfo& launch, const std::string& backend,
                             std::chrono::milliseconds rendezvous_timeout);

}  // namespace rcl
