#include "rocm_conformance_llm/reports/heartbeat.hpp"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {

std::filesystem::path heartbeat_path(const std::filesystem::path& output_dir, int rank) {
  return output_dir / (rank == 0 ? "heartbeat.json" : fmt::format("heartbeat.rank{}.json", rank));
}

namespace {
struct Beat {
  double unix_time = 0;
  bool running = false;  // false: the rank ended on its own, with its own verdict (finish())
  int64_t pid = 0;
  std::string host;  // empty in files written before `host` was added
};
// The file's write time as it says, and whether its rank still runs; nullopt when absent or unreadable.
std::optional<Beat> read_beat(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const auto beat = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!beat.is_object() || !beat.contains("unix_time") || !beat["unix_time"].is_number()) return std::nullopt;
  const auto pid = beat.value("pid", nlohmann::json());
  return Beat{beat["unix_time"].get<double>(), beat.value("status", "") == "running",
              pid.is_number_integer() ? pid.get<int64_t>() : 0, beat.value("host", "")};
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
}  // namespace

char process_state(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : 0;
}

std::vector<int> lost_peers_now(const std::filesystem::path& output_dir, int rank, int world_size) {
  const std::string& here = host_name();
  std::vector<int> lost;
  for (int r = 0; r < world_size; ++r) {
    const auto beat = r == rank ? std::nullopt : read_beat(heartbeat_path(output_dir, r));
    if (!beat || !beat->running) continue;
    bool gone = unix_now() - beat->unix_time > kStaleHeartbeats * double(kHeartbeatInterval.count());
    if (!here.empty() && beat->host == here && beat->pid > 0) {
      const char state = process_state(beat->pid);
      gone = gone || state == 0 || state == 'Z' || state == 'T' || state == 't';
    }
    if (gone) lost.push_back(r);
  }
  return lost;
}

std::vector<int> stalled_peers(const std::filesystem::path& output_dir, int rank, int world_size,
                               std::chrono::milliseconds window) {
  // A peer that ended with a verdict of its own (its collective failed too, and it exited after
  // its report) is not lost: in a 3-rank run whose rank 1 froze, rank 0 reports and exits, and
  // rank 2, timing out a moment later, must still name rank 1 alone.
  std::map<int, double> first;  // peer -> unix_time at the start, for running peers with a file
  for (int r = 0; r < world_size; ++r)
    if (const auto beat = r == rank ? std::nullopt : read_beat(heartbeat_path(output_dir, r)); beat && beat->running)
      first[r] = beat->unix_time;
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::vector<int> stalled;
  while (true) {
    stalled.clear();
    for (const auto& [r, t] : first) {
      const auto now = read_beat(heartbeat_path(output_dir, r));
      if (!now || (now->running && now->unix_time == t)) stalled.push_back(r);
    }
    if (stalled.empty() || std::chrono::steady_clock::now() >= deadline) return stalled;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

HeartbeatFile::HeartbeatFile(const std::filesystem::path& output_dir, int rank, const Watchdog& watchdog)
    : path_(heartbeat_path(output_dir, rank)), rank_(rank), watchdog_(watchdog) {
  write("running");
  thread_ = std::thread([this] { run(); });
}

HeartbeatFile::~HeartbeatFile() { stop(); }

void HeartbeatFile::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatFile::finish(const std::string& status) {
  stop();
  write(status);
}

void HeartbeatFile::write(const std::string& status) {
  const auto s = watchdog_.status();
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char iso[32];
  std::strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const nlohmann::json beat = {{"status", status},
                               {"time", iso},
                               {"unix_time", std::chrono::duration<double>(now.time_since_epoch()).count()},
                               {"interval_s", kHeartbeatInterval.count()},
                               {"pid", ::getpid()},
                               {"host", host_name()},
                               {"rank", rank_},
                               {"phase", s.phase},
                               {"step", s.phase_step},
                               {"last_completed_step", s.last_completed_step},
                               {"seconds_in_phase", s.seconds_in_phase},
                               {"seconds_since_progress", s.seconds_since_progress}};
  try {
    write_file_atomically(path_, beat.dump(2) + "\n");
  } catch (const std::exception& e) {
    // Liveness is for outside monitors; a full disk is the checkpoint's and report's problem.
    if (!warned_) spdlog::warn("heartbeat: {}", e.what());
    warned_ = true;
  }
}

void HeartbeatFile::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kHeartbeatInterval, [this] { return stopping_; })) {
    lock.unlock();
    write("running");
    lock.lock();
  }
}

}  // namespace rcl
