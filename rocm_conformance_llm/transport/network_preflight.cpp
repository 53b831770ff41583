#include "rocm_conformance_llm/transport/network_preflight.hpp"

#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

extern char** environ;

namespace rcl {
namespace {

// The variables that steer the collectives' sockets, recorded as the run met them.
constexpr std::array kNetworkPrefixes = {"GLOO_", "NCCL_", "RCCL_", "TP_SOCKET_", "FI_", "UCX_"};
constexpr std::array kNetworkNames = {"MASTER_ADDR", "MASTER_PORT"};

// Between two connect attempts to a rendezvous host not listening yet.
constexpr std::chrono::milliseconds kProbeRetry{250};
constexpr std::chrono::milliseconds kConnectWait{1000};

struct AddrInfoDeleter {
  void operator()(addrinfo* list) const { ::freeaddrinfo(list); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoList resolve(const std::string& host, const char* service) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), service, &hints, &list) != 0) return nullptr;
  return AddrInfoList(list);
}

std::optional<std::string> numeric(const sockaddr* addr, socklen_t length) {
  char text[NI_MAXHOST] = {};
  if (::getnameinfo(addr, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return std::nullopt;
  return std::string(text);
}

struct Socket {
  explicit Socket(int family) : fd(::socket(family, SOCK_STREAM, 0)) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd;
};

// One non-blocking connect, given at most `wait` to complete.
TcpProbe connect_once(const addrinfo& addr, std::chrono::milliseconds wait) {
  Socket s(addr.ai_family);
  if (s.fd < 0) return TcpProbe::silent;
  ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) | O_NONBLOCK);
  if (::connect(s.fd, addr.ai_addr, addr.ai_addrlen) == 0) return TcpProbe::answers;
  if (errno == ECONNREFUSED) return TcpProbe::refused;
  if (errno != EINPROGRESS) return TcpProbe::silent;
  pollfd p{s.fd, POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) return TcpProbe::silent;
  int error = 0;
  socklen_t length = sizeof(error);
  if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return TcpProbe::silent;
  return error == 0 ? TcpProbe::answers : error == ECONNREFUSED ? TcpProbe::refused : TcpProbe::silent;
}

// The first of `names` that is set and a whole number: its name and value.
std::optional<std::pair<std::string, int>> first_count(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const auto text = env(name);
    const auto value = text ? parse_number<int>(*text) : std::nullopt;
    if (value) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

std::string names_with_addresses(const std::vector<NetInterface>& interfaces) {
  std::vector<std::string> names;
  for (const auto& i : interfaces)
    if (!i.addresses.empty()) names.push_back(i.name);
  return names.empty() ? "none" : join(names);
}

// The interface to suggest: up, not loopback, with an IPv4 address if one has it.
const NetInterface* suggested_interface(const std::vector<NetInterface>& interfaces) {
  const NetInterface* best = nullptr;
  for (const auto& i : interfaces) {
    if (!i.up || i.loopback || i.addresses.empty()) continue;
    const bool ipv4 = i.addresses.front().find(':') == std::string::npos;
    if (ipv4) return &i;
    if (!best) best = &i;
  }
  return best;
}

std::string fix_for_host(const std::vector<NetInterface>& interfaces) {
  const NetInterface* i = suggested_interface(interfaces);
  if (!i) return fmt::format("give host '{}' a non-loopback interface, or set GLOO_SOCKET_IFNAME", host_name());
  return fmt::format("set GLOO_SOCKET_IFNAME={} or add '{} {}' to /etc/hosts", i->name, i->addresses.front(),
                     host_name());
}

std::optional<std::string> env_var(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// GLOO_SOCKET_IFNAME: one interface (the transport binds exactly one), here, with an address, and
// not loopback when peers on other hosts must reach it.
void check_gloo_interface(const std::string& name, const std::vector<NetInterface>& interfaces,
                          const std::optional<std::string>& spans) {
  const std::string where = fmt::format("GLOO_SOCKET_IFNAME='{}' on host '{}'", name, host_name());
  if (name.find(',') != std::string::npos)
    throw ConfigError(fmt::format("{}: this tool binds one interface; set it to one of {}", where,
                                  names_with_addresses(interfaces)));
  const auto it = std::ranges::find(interfaces, name, &NetInterface::name);
  if (it == interfaces.end() || it->addresses.empty())
    throw ConfigError(fmt::format("{}: {} here; set GLOO_SOCKET_IFNAME to one of {}", where,
                                  it == interfaces.end() ? "no such interface" : "the interface has no address",
                                  names_with_addresses(interfaces)));
  if (it->loopback && spans)
    throw ConfigError(fmt::format("{}: a loopback interface, but the world spans hosts ({}); {}", where, *spans,
                                  fix_for_host(interfaces)));
}

void check_nccl_interface(const std::string& spec, const std::vector<NetInterface>& interfaces) {
  if (!nccl_interfaces(spec, interfaces).empty()) return;
  throw ConfigError(fmt::format(
      "NCCL_SOCKET_IFNAME='{}' on host '{}' selects no interface here (interfaces: {}; a name is a prefix, "
      "'=' before the list for exact names, '^' to exclude); set it to match one of them or unset it",
      spec, host_name(), names_with_addresses(interfaces)));
}

// Without GLOO_SOCKET_IFNAME, Gloo announces the address this host's name resolves to, loopback
// when it resolves to none: peers on other hosts then connect to themselves and are refused.
void check_host_address(const std::vector<NetInterface>& interfaces, const std::string& spans,
                        nlohmann::json& record) {
  const auto address = gloo_address_of(host_name());
  record["gloo_address"] = address ? nlohmann::json(*address) : nlohmann::json(nullptr);
  if (address && !is_loopback_address(*address)) return;
  const std::string what = address ? fmt::format("resolves to the loopback address {}", *address)
                                   : std::string("does not resolve to an address of this host");
  throw ConfigError(fmt::format(
      "host '{}' {} but the world spans hosts ({}): Gloo would announce loopback to its peers and they could "
      "not connect; {}",
      host_name(), what, spans, fix_for_host(interfaces)));
}

bool is_local_host(const std::string& host, const std::vector<NetInterface>& interfaces) {
  const AddrInfoList list = resolve(host, nullptr);
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    const auto text = numeric(a->ai_addr, a->ai_addrlen);
    if (!text) continue;
    if (is_loopback_address(*text)) return true;
    for (const auto& i : interfaces)
      if (std::ranges::find(i.addresses, *text) != i.addresses.end()) return true;
  }
  return false;
}

}  // namespace

std::vector<NetInterface> list_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::vector<NetInterface> interfaces;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    auto it = std::ranges::find(interfaces, std::string(a->ifa_name), &NetInterface::name);
    if (it == interfaces.end()) {
      interfaces.push_back({a->ifa_name, (a->ifa_flags & IFF_UP) != 0, (a->ifa_flags & IFF_LOOPBACK) != 0, {},
                            (a->ifa_flags & IFF_RUNNING) != 0});
      it = std::prev(interfaces.end());
    }
    if (a->ifa_addr == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (auto text = numeric(a->ifa_addr, length)) it->addresses.push_back(*text);
  }
  ::freeifaddrs(list);
  return interfaces;
}

std::vector<std::string> nccl_interfaces(const std::string& spec, const std::vector<NetInterface>& interfaces) {
  std::string_view rest = spec;
  const bool exclude = rest.starts_with('^');
  if (exclude) rest.remove_prefix(1);
  const bool exact = rest.starts_with('=');
  if (exact) rest.remove_prefix(1);
  const auto listed = split_commas(std::string(rest));
  std::vector<std::string> chosen;
  for (const auto& i : interfaces) {
    if (i.addresses.empty()) continue;
    const bool matches = std::ranges::any_of(
        listed, [&](const std::string& entry) { return exact ? i.name == entry : i.name.starts_with(entry); });
    if (matches != exclude) chosen.push_back(i.name);
  }
  return chosen;
}

bool is_loopback_address(const std::string& numeric_address) {
  std::string_view a = numeric_address;
  if (a.starts_with("::ffff:")) a.remove_prefix(7);
  return a.starts_with("127.") || a == "::1";
}

std::optional<std::string> gloo_address_of(const std::string& host) {
  const AddrInfoList list = resolve(host, nullptr);
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    Socket s(a->ai_family);
    if (s.fd >= 0 && ::bind(s.fd, a->ai_addr, a->ai_addrlen) == 0) return numeric(a->ai_addr, a->ai_addrlen);
  }
  return std::nullopt;
}

std::optional<std::string> spans_hosts(const LaunchInfo& launch, const EnvLookup& env,
                                       const std::function<bool(const std::string&)>& is_local_host) {
  if (!launch.distributed()) return std::nullopt;
  // A node count above one, or fewer ranks on this node than in the world (the first variable set
  // of each: a Slurm step's own node count before its job's).
  const auto nodes =
      first_count(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "GROUP_WORLD_SIZE"});
  if (nodes && nodes->second > 1) return fmt::format("{}={}", nodes->first, nodes->second);
  const auto local = first_count(env, {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  if (local && local->second < launch.world_size)
    return fmt::format("{}={} < world size {}", local->first, local->second, launch.world_size);
  if (!is_local_host(launch.master_addr))
    return fmt::format("MASTER_ADDR={} is not an address of this host", launch.master_addr);
  return std::nullopt;
}

bool tcp_answers(const std::string& host, int port, std::chrono::milliseconds wait) {
  const auto deadline = SteadyClock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (tcp_probe(host, port, std::clamp(left, std::chrono::milliseconds(1), kConnectWait)) == TcpProbe::answers)
      return true;
    if (SteadyClock::now() + kProbeRetry >= deadline) return false;
    std::this_thread::sleep_for(kProbeRetry);
  }
}

TcpProbe tcp_probe(const std::string& host, int port, std::chrono::milliseconds wait) {
  const AddrInfoList list = resolve(host, std::to_string(port).c_str());
  TcpProbe met = TcpProbe::silent;  // a refusal from any of the host's addresses outweighs silence
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    const TcpProbe probe = connect_once(*a, wait);
    if (probe == TcpProbe::answers) return probe;
    if (probe == TcpProbe::refused) met = probe;
  }
  return met;
}

std::vector<std::string> cut_links(const std::vector<NetInterface>& interfaces) {
  std::vector<std::string> cut;
  for (const auto& i : interfaces) {
    if (i.loopback) continue;
    if (i.up && i.running) return {};
    cut.push_back(i.name);
  }
  return cut;
}

nlohmann::json network_variables(const std::vector<std::pair<std::string, std::string>>& environment) {
  nlohmann::json variables = nlohmann::json::object();
  for (const auto& [name, value] : environment) {
    const bool network = std::ranges::find(kNetworkNames, name) != kNetworkNames.end() ||
                         std::ranges::any_of(kNetworkPrefixes, [&](const char* p) { return name.starts_with(p); });
    if (network) variables[name] = value;
  }
  return variables;
}

nlohmann::json check_network(const LaunchInfo& launch, const std::string& backend,
                             std::chrono::milliseconds rendezvous_timeout) {
  std::vector<std::pair<std::string, std::string>> environment;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) environment.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  nlohmann::json record = {{"host", host_name()}, {"variables", network_variables(environment)}};
  if (!launch.distributed()) return record;

  const auto interfaces = list_interfaces();
  const auto spans = spans_hosts(launch, env_var, [&](const std::string& h) { return is_local_host(h, interfaces); });
  record["spans_hosts"] = spans ? nlohmann::json(*spans) : nlohmann::json(false);
  if (const auto gloo_ifname = env_var("GLOO_SOCKET_IFNAME"); gloo_ifname && !gloo_ifname->empty()) {
    check_gloo_interface(*gloo_ifname, interfaces, spans);
  } else if (spans) {
    check_host_address(interfaces, *spans, record);
  }
  if (const auto nccl_ifname = env_var("NCCL_SOCKET_IFNAME");
      nccl_ifname && !nccl_ifname->empty() && (backend == "nccl" || backend == "rccl"))
    check_nccl_interface(*nccl_ifname, interfaces);

  // Rank 0 serves the store itself unless the launcher does; everyone else must reach it, and
  // under a launcher rank 0 may still be starting: wait as long as the rendezvous would.
  if (launch.rank != 0 || launch.launcher_store_prefix) {
    if (!tcp_answers(launch.master_addr, launch.master_port, rendezvous_timeout))
      throw ConfigError(fmt::format(
          "the rendezvous at MASTER_ADDR={} MASTER_PORT={} did not answer host '{}' within {:.0f} s "
          "(--set collective_timeout_s): check that rank 0's node is up and that MASTER_ADDR is its address as "
          "this host reaches it (name resolution, route, firewall)",
          launch.master_addr, launch.master_port, host_name(),
          std::chrono::duration<double>(rendezvous_timeout).count()));
  }
  return record;
}

}  // namespace rcl
