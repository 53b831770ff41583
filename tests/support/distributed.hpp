// Shared by the distributed tests: a free loopback port for a test's rendezvous, and what state
// a rank's process is in.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "rocm_conformance_llm/reports/heartbeat.hpp"

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

// What state a rank's process is in ('T': stopped, 'Z': exited, not yet reaped, 0: gone).
using rcl::process_state;

}  // namespace rcl::test
