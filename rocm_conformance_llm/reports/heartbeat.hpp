// heartbeat.json: the run's liveness for monitors outside the process (a cluster's health
// checker, a person with `watch cat`). A thread rewrites it atomically every kHeartbeatInterval
// from the watchdog's view (phase, step, seconds in phase, seconds since the last finished step).
// A fresh `time` with a growing `step` is a slow run; a fresh `time` with the same step and a
// growing `seconds_since_progress` is a stuck one (the watchdog declares it hung at its
// timeout); a stale `time` is a process that is gone or stopped (SIGKILL, SIGSTOP, a lost node).
// Fields: docs/outputs.md.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rocm_conformance_llm/checks/monitors/watchdog.hpp"

namespace rcl {

inline constexpr std::chrono::seconds kHeartbeatInterval{1};

// heartbeat.json for rank 0, heartbeat.rank<N>.json for the others.
std::filesystem::path heartbeat_path(const std::filesystem::path& output_dir, int rank);

// The peers (ranks other than `rank` of `world_size`) whose heartbeat file in `output_dir` did not
// change within `window` (a few intervals): stopped or gone. A collective that timed out cannot
// always name its lost peer through the store (the peer may have entered the collective before it
// stopped, or left a store request half-sent, which blocks libtorch 1.13's store server); a shared
// output directory still can. Peers without a file (no shared directory) are not named.
std::vector<int> stalled_peers(const std::filesystem::path& output_dir, int rank, int world_size,
                               std::chrono::milliseconds window);

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z' zombie, ...); 0 when gone.
char process_state(int64_t pid);

// A peer whose heartbeat is older than this many intervals is gone or frozen.
inline constexpr int kStaleHeartbeats = 3;

// The peers lost as far as their heartbeat files tell at once, without waiting (a stop signal's
// report cannot wait out a collective): a peer on this host whose process is gone, a zombie or
// stopped (SIGSTOP, a debugger), or a peer anywhere whose heartbeat is kStaleHeartbeats intervals
// old. A peer that wrote its own verdict, or has no file, is not named; a peer on another host
// killed less than kStaleHeartbeats seconds ago is not known yet.
std::vector<int> lost_peers_now(const std::filesystem::path& output_dir, int rank, int world_size);

class HeartbeatFile {
 public:
  // heartbeat.json (rank 0) or heartbeat.rank<N>.json; written now, then every interval.
  HeartbeatFile(const std::filesystem::path& output_dir, int rank, const Watchdog& watchdog);
  ~HeartbeatFile();  // stops the thread; the file stays with its last content
  HeartbeatFile(const HeartbeatFile&) = delete;
  HeartbeatFile& operator=(const HeartbeatFile&) = delete;

  // The last write: `status` is the run's outcome ("completed", "interrupted", ...); stops the thread.
  void finish(const std::string& status);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write(const std::string& status);
  void run();
  void stop();

  std::filesystem::path path_;
  int rank_;
  const Watchdog& watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool warned_ = false;
  std::thread thread_;
};

}  // namespace rcl
