// Shared by the distributed tests: a free loopback port for a test's rendezvous, ranks as
// threads of one process over loopback, and what state a rank's process is in.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <barrier>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rocm_conformance_llm/reports/heartbeat.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"

namespace rcl::test {

// A loopback port nobody holds right now (the kernel picks it; closed again at once).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("no free loopback port");
  return ntohs(addr.sin_port);
}

inline LaunchInfo loopback_launch(int rank, int world, int port) {
  LaunchInfo launch;
  launch.rank = rank;
  launch.world_size = world;
  launch.local_rank = rank;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  launch.launcher = "test";
  return launch;
}

// Runs body(member, rank) on `world` threads, each rank's member made by make(launch) (a
// shared_ptr). Ranks tear down only after all bodies returned (rank 0 serves the store), unless
// a body resets its own member to vanish early. Rethrows the first exception a body let escape.
template <typename Make, typename Body>
void run_loopback_ranks(int world, Make make, Body body) {
  const int port = free_port();
  std::barrier all_done(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      decltype(make(loopback_launch(r, world, port))) member;
      try {
        member = make(loopback_launch(r, world, port));
        body(member, r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      all_done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// What state a rank's process is in ('T': stopped, 'Z': exited, not yet reaped, 0: gone).
using rcl::process_state;

}  // namespace rcl::test
