// The network preflight's pieces on this host: interface lookup, NCCL_SOCKET_IFNAME's syntax, the
// address Gloo would announce, whether a world spans hosts, the rendezvous probe against a port that
// listens (at once or late) and one that does not, and the refusals check_network makes of them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/transport/network_preflight.hpp"
#include "support/config_error.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

using Env = std::map<std::string, std::string>;
using std::chrono::milliseconds;

EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

LaunchInfo world_of(int rank, int world, const std::string& master = "127.0.0.1", int port = 29500) {
  LaunchInfo launch;
  launch.launcher = "torchrun";
  launch.rank = rank;
  launch.world_size = world;
  launch.master_addr = master;
  launch.master_port = port;
  return launch;
}

// A loopback socket bound to a kernel-chosen port; listening only when asked.
struct LoopbackPort {
  LoopbackPort() : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0)
      throw std::runtime_error("no loopback port");
    port = ntohs(addr.sin_port);
  }
  ~LoopbackPort() { ::close(fd); }
  void listen() const { ASSERT_EQ(::listen(fd, 4), 0); }
  int fd;
  int port = 0;
};

// check_network's ConfigError message under `variables` (set for the call only), "" if none.
std::string refusal(const LaunchInfo& launch, const Env& variables, const std::string& backend = "gloo") {
  for (const auto& [name, value] : variables) ::setenv(name.c_str(), value.c_str(), 1);
  const std::string message = testing::config_error_of([&] { check_network(launch, backend, milliseconds(300)); });
  for (const auto& [name, value] : variables) ::unsetenv(name.c_str());
  return message;
}

using Names = std::vector<std::string>;

const std::vector<NetInterface> kInterfaces = {
    {"lo", true, true, {"127.0.0.1", "::1"}, true},
    {"eth0", true, false, {"10.0.0.1"}, true},
    {"eth10", true, false, {"10.0.0.2"}, true},
    {"ib0", true, false, {}, true},  // no address: NCCL cannot use it
};

TEST(NetworkPreflightTest, ListsThisHostsLoopbackInterface) {
  const auto interfaces = list_interfaces();
  const auto lo = std::ranges::find_if(interfaces, [](const NetInterface& i) { return i.loopback; });
  ASSERT_NE(lo, interfaces.end());
  EXPECT_TRUE(lo->up);
  EXPECT_NE(std::ranges::find(lo->addresses, "127.0.0.1"), lo->addresses.end()) << lo->name;
}

TEST(NetworkPreflightTest, NcclIfnameTakesPrefixesExactNamesAndExclusions) {
  EXPECT_EQ(nccl_interfaces("eth", kInterfaces), (Names{"eth0", "eth10"}));
  EXPECT_EQ(nccl_interfaces("=eth1", kInterfaces), Names{});
  EXPECT_EQ(nccl_interfaces("=eth10", kInterfaces), Names{"eth10"});
  EXPECT_EQ(nccl_interfaces("ib,eth1", kInterfaces), Names{"eth10"});
  EXPECT_EQ(nccl_interfaces("^eth", kInterfaces), Names{"lo"});
  EXPECT_EQ(nccl_interfaces("^=eth0,lo", kInterfaces), Names{"eth10"});
  EXPECT_EQ(nccl_interfaces("ib", kInterfaces), Names{});
  EXPECT_EQ(nccl_interfaces("wlan", kInterfaces), Names{});
}

TEST(NetworkPreflightTest, ClassifiesLoopbackAddresses) {
  for (const char* a : {"127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"}) EXPECT_TRUE(is_loopback_address(a)) << a;
  for (const char* a : {"10.231.0.1", "::ffff:10.0.0.1", "fe80::1", "1.27.0.0"})
    EXPECT_FALSE(is_loopback_address(a)) << a;
}

TEST(NetworkPreflightTest, GlooAddressIsTheFirstBindableOneOrNone) {
  const auto localhost = gloo_address_of("localhost");
  ASSERT_TRUE(localhost.has_value());
  EXPECT_TRUE(is_loopback_address(*localhost)) << *localhost;
  EXPECT_EQ(gloo_address_of("127.0.0.1"), "127.0.0.1");
  // TEST-NET-1 (RFC 5737): an address of no host here, so nothing binds it.
  EXPECT_EQ(gloo_address_of("192.0.2.1"), std::nullopt);
}

TEST(NetworkPreflightTest, TellsWhenTheWorldSpansHosts) {
  const auto local = [](const std::string& h) { return h == "127.0.0.1"; };
  EXPECT_EQ(spans_hosts(world_of(0, 1, "10.9.9.9"), lookup({}), local), std::nullopt);
  EXPECT_EQ(spans_hosts(world_of(0, 4), lookup({{"LOCAL_WORLD_SIZE", "4"}}), local), std::nullopt);
  EXPECT_EQ(spans_hosts(world_of(1, 4), lookup({{"LOCAL_WORLD_SIZE", "2"}}), local),
            "LOCAL_WORLD_SIZE=2 < world size 4");
  EXPECT_EQ(spans_hosts(world_of(1, 4), lookup({{"SLURM_JOB_NUM_NODES", "2"}}), local), "SLURM_JOB_NUM_NODES=2");
  // The step's node count wins over the job's: a one-node step of a two-node job.
  EXPECT_EQ(spans_hosts(world_of(1, 2), lookup({{"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_JOB_NUM_NODES", "2"}}), local),
            std::nullopt);
  EXPECT_EQ(spans_hosts(world_of(1, 2, "10.9.9.9"), lookup({}), local),
            "MASTER_ADDR=10.9.9.9 is not an address of this host");
}

TEST(NetworkPreflightTest, ProbeAnswersOnlyWhenTheRendezvousListens) {
  const LoopbackPort listening;
  listening.listen();
  EXPECT_TRUE(tcp_answers("127.0.0.1", listening.port, milliseconds(2000)));
  const LoopbackPort silent;  // bound, never listening: connections are refused
  EXPECT_FALSE(tcp_answers("127.0.0.1", silent.port, milliseconds(600)));
}

// Under a launcher rank 0 may start listening after the others probe: the probe waits for it.
TEST(NetworkPreflightTest, ProbeWaitsForALateRendezvous) {
  const LoopbackPort late;
  auto probe = std::async(std::launch::async, [&] { return tcp_answers("127.0.0.1", late.port, milliseconds(20000)); });
  std::this_thread::sleep_for(milliseconds(700));
  late.listen();
  EXPECT_TRUE(probe.get());
}

TEST(NetworkPreflightTest, RefusesAnInterfaceThatIsNotHere) {
  const std::string message = refusal(world_of(0, 2), {{"GLOO_SOCKET_IFNAME", "rclnosuch0"}});
  EXPECT_NE(message.find("GLOO_SOCKET_IFNAME='rclnosuch0' on host '" + host_name() + "': no such interface"),
            std::string::npos)
      << message;
  EXPECT_EQ(refusal(world_of(0, 2), {{"GLOO_SOCKET_IFNAME", "lo"}}), "");
  EXPECT_NE(refusal(world_of(0, 4), {{"GLOO_SOCKET_IFNAME", "lo"}, {"LOCAL_WORLD_SIZE", "2"}}).find("loopback"),
            std::string::npos);
  // NCCL's variable matters only where NCCL (RCCL) carries the collectives.
  EXPECT_EQ(refusal(world_of(0, 2), {{"NCCL_SOCKET_IFNAME", "=rclnosuch0"}}), "");
  EXPECT_NE(refusal(world_of(0, 2), {{"NCCL_SOCKET_IFNAME", "=rclnosuch0"}}, "rccl").find("selects no interface"),
            std::string::npos);
}

TEST(NetworkPreflightTest, RefusesARendezvousThatDoesNotAnswerAndRecordsTheVariables) {
  const LoopbackPort silent;
  const std::string message = refusal(world_of(1, 2, "127.0.0.1", silent.port), {});
  EXPECT_NE(message.find("MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(silent.port) + " did not answer host '" +
                         host_name() + "'"),
            std::string::npos)
      << message;
  // Rank 0 serves the store itself: nothing to probe.
  EXPECT_EQ(refusal(world_of(0, 2, "127.0.0.1", silent.port), {}), "");

  ::setenv("NCCL_DEBUG", "INFO", 1);
  const auto record = check_network(world_of(0, 1), "gloo", milliseconds(1));
  ::unsetenv("NCCL_DEBUG");
  EXPECT_EQ(record.at("host"), host_name());
  EXPECT_EQ(record.at("variables").at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(network_variables({{"PATH", "/bin"}, {"GLOO_SOCKET_IFNAME", "eth0"}, {"MASTER_PORT", "1"}}),
            (nlohmann::json{{"GLOO_SOCKET_IFNAME", "eth0"}, {"MASTER_PORT", "1"}}));
}

// What a survivor learns of the store's host when the store stops answering: a refusal proves the
// host reachable and the store's process gone; silence proves nothing about either side.
TEST(NetworkPreflightTest, TcpProbeTellsAListenerARefusalAndSilenceApart) {
  const LoopbackPort port;
  EXPECT_EQ(tcp_probe("127.0.0.1", port.port, milliseconds(500)), TcpProbe::refused);  // bound, not listening
  port.listen();
  EXPECT_EQ(tcp_probe("127.0.0.1", port.port, milliseconds(500)), TcpProbe::answers);
  // No answer at all (a name that never resolves, RFC 6761): silence, never a refusal. Silence on a
  // cut path is proved end to end by binary.SimCluster.Node0LinkCutNamesNode0AndNode1NamesNoNode.
  EXPECT_EQ(tcp_probe("store.invalid", 9, milliseconds(200)), TcpProbe::silent);
}

TEST(NetworkPreflightTest, ALinkIsCutOnlyWhenEveryNonLoopbackInterfaceHasLostIt) {
  std::vector<NetInterface> host = {{"lo", true, true, {"127.0.0.1"}, true}, {"eth0", true, false, {"10.0.0.1"}, false}};
  EXPECT_EQ(cut_links(host), Names{"eth0"});  // up, no carrier
  host.push_back({"eth1", false, false, {}, false});
  EXPECT_EQ(cut_links(host), (Names{"eth0", "eth1"}));
  host.push_back({"eth2", true, false, {"10.0.2.1"}, true});
  EXPECT_EQ(cut_links(host), Names{});
  EXPECT_EQ(cut_links({{"lo", true, true, {"127.0.0.1"}, true}}), Names{});  // loopback only: nothing to cut
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
