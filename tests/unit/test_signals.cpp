// The run's signal handling (run/signals.hpp): once installed, a write to a peer that has gone
// away is an error the caller sees (EPIPE), not a SIGPIPE that ends the process before its report.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>

#include "rocm_conformance_llm/run/signals.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TEST(StopSignals, AWriteToAClosedPeerIsAnErrorNotTheProcesssDeath) {
  signals::install();
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
  ::close(ends[1]);  // the peer is gone, as a lost rank's or the store's socket is
  errno = 0;
  const char byte = 'x';
  EXPECT_EQ(::write(ends[0], &byte, 1), -1);  // without SIGPIPE ignored the process ends here
  EXPECT_EQ(errno, EPIPE);
  ::close(ends[0]);
  EXPECT_EQ(signals::received(), 0);  // and it is no stop request
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
