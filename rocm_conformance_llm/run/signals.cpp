#include "rocm_conformance_llm/run/signals.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/errors.hpp"

namespace rcl::signals {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

std::atomic<int> first_signal{0};  // lock-free int: safe to store from a handler
int wake_pipe[2] = {-1, -1};       // the handler's only other action: one byte per signal
std::mutex force_mutex;
ForceStop force_stop;

void on_signal(int sig) {
  int none = 0;
  first_signal.compare_exchange_strong(none, sig);
  const int saved_errno = errno;
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] const auto n = ::write(wake_pipe[1], &byte, 1);
  errno = saved_errno;
}

// Blocks until a signal arrives (or `timeout_ms` passes, -1: forever); true when one did.
bool wait_for_signal(int timeout_ms) {
  pollfd fd{wake_pipe[0], POLLIN, 0};
  while (true) {
    const int ready = ::poll(&fd, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char byte;
    return ::read(wake_pipe[0], &byte, 1) == 1;
  }
}

void force(int sig) {
  std::lock_guard<std::mutex> lock(force_mutex);  // held until the exit: no concurrent Job teardown
  if (force_stop) force_stop(sig);
  spdlog::error("stopped by {} before the run could write a report", name(sig));
  spdlog::default_logger()->flush();
  std::_Exit(kExitInterrupted);
}

void watch() {
  wait_for_signal(-1);
  const int sig = received();
  spdlog::warn("received {}: stopping at the next step boundary (a second signal stops now)", name(sig));
  const bool again = wait_for_signal(static_cast<int>(std::chrono::milliseconds(kStopGrace).count()));
  if (!again)
    spdlog::error("no step boundary within {} s of {}: writing the report now", kStopGrace.count(), name(sig));
  force(sig);
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("signals: pipe2 failed");
    ::fcntl(wake_pipe[0], F_SETFL, 0);  // the watcher blocks; the handler's end never does
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (const int sig : kStopSignals) ::sigaction(sig, &action, nullptr);
    // A write to a peer that is gone (the job's store or a Gloo link after a rank, a node or the
    // store's host was lost) must fail with EPIPE, which the run handles and reports, not kill the
    // process before its report: a rank 0 resumed after a freeze died of SIGPIPE writing to the
    // store its node mate had closed.
    ::signal(SIGPIPE, SIG_IGN);
    std::thread(watch).detach();
  });
}

int received() { return first_signal.load(); }

const char* name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal";
  }
}

void set_force_stop(ForceStop force) {
  std::lock_guard<std::mutex> lock(force_mutex);
  force_stop = std::move(force);
}

}  // namespace rcl::signals
