#include "rocm_conformance_llm/checks/monitors/watchdog.hpp"

#include <fmt/format.h>

namespace rcl {

Watchdog::Watchdog(double timeout_s, int rank, FindingLog& log, OnHang on_hang)
    : timeout_(timeout_s),
      rank_(rank),
      log_(log),
      on_hang_(std::move(on_hang)),
      last_progress_(std::chrono::steady_clock::now()),
      phase_since_(last_progress_),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Watchdog::heartbeat(int64_t completed_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_progress_ = std::chrono::steady_clock::now();
  last_completed_step_ = completed_step;
}

void Watchdog::on_phase(const char* phase, int64_t step, const std::vector<CollectiveSample>& collectives) {
  if (collectives.empty()) return set_phase(phase, step);
  const auto& c = collectives.back();
  set_phase(phase, step, fmt::format("{} of {} bytes (sequence {})", c.op, c.bytes, c.sequence));
}

void Watchdog::set_phase(std::string phase, int64_t step, std::string last_collective) {
  std::lock_guard<std::mutex> lock(mutex_);
  phase_ = std::move(phase);
  phase_step_ = step;
  phase_since_ = std::chrono::steady_clock::now();
  if (!last_collective.empty()) last_collective_ = std::move(last_collective);
}

bool Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fired_;
}

std::string Watchdog::current_phase() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return phase_;
}

Watchdog::Status Watchdog::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  return {phase_, phase_step_, last_completed_step_, std::chrono::duration<double>(now - phase_since_).count(),
          std::chrono::duration<double>(now - last_progress_).count()};
}

int64_t Watchdog::current_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return phase_step_;
}

Finding Watchdog::hang_finding(std::chrono::steady_clock::time_point now) const {
  const bool collective = phase::is_collective(phase_);
  const double stalled_s = std::chrono::duration<double>(now - last_progress_).count();
  const int64_t step = phase_step_ > 0 ? phase_step_ : last_completed_step_ + 1;
  return Finding{.component = collective ? component::rccl : component::hip_runtime,
                 .signature = collective ? "collective_hang" : "hang",
                 .severity = Severity::fail,
                 .step = step,
                 .rank = rank_,
                 .message = fmt::format("no step finished for {:.1f} s (timeout {:.1f} s) while in '{}' of "
                                        "step {}{}",
                                        stalled_s, timeout_.count(), phase_, step,
                                        last_collective_.empty() ? "" : "; last collective: " + last_collective_),
                 .evidence = {{"phase", phase_},
                              {"phase_step", phase_step_},
                              {"seconds_in_phase", std::chrono::duration<double>(now - phase_since_).count()},
                              {"last_completed_step", last_completed_step_},
                              {"last_collective", last_collective_},
                              {"seconds_since_progress", stalled_s},
                              {"timeout_s", timeout_.count()}}};
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const auto deadline = last_progress_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
    if (wake_.wait_until(lock, deadline, [this] { return stopping_; })) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_progress_ < timeout_) continue;  // a heartbeat arrived meanwhile
    fired_ = true;
    const Finding finding = hang_finding(now);
    lock.unlock();
    log_.add(finding);
    if (on_hang_) on_hang_(finding);
    return;
  }
}

}  // namespace rcl
