// The node under the job: per-GPU telemetry from amd-smi or ROCm SMI (platform/rocm_dlopen.hpp) sampled on
// a thread into telemetry.jsonl, and the amdgpu kernel log (kernel_log.hpp), so a failed step
// can be put next to a throttle, an ECC error or a GPU reset. docs/telemetry.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/checks/findings/coverage.hpp"
#include "rocm_conformance_llm/checks/findings/finding_log.hpp"
#include "rocm_conformance_llm/checks/monitors/kernel_log.hpp"
#include "rocm_conformance_llm/config.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

namespace rcl {

// One sampling round over every GPU SMI monitors.
struct TelemetrySample {
  double t_s = 0;                        // seconds since the monitor started
  int64_t step = 0;                      // last finished step when sampled (0: before step 1)
  std::optional<uint32_t> device_count;  // nullopt: the count query itself failed
  std::vector<nlohmann::json> gpus;      // SmiLibrary::sample() of each device
};
nlohmann::json to_json(const TelemetrySample& s);

// Judges one run's samples; no thread and no library, so the tests feed it directly.
// Signatures (component HIP runtime, i.e. the driver and the device under it):
//   ecc_uncorrectable_increase (fail): a GPU's uncorrectable ECC count rose since the last sample.
//   ecc_correctable_increase (warn): its correctable count rose.
//   gpu_disappeared (fail): fewer GPUs than at the start, or one that answered stops answering.
//   gpu_throttled (warn, at finish): throttle_status non-zero in some samples; the evidence
//     lists each episode with the steps it overlaps.
class TelemetryTracker {
 public:
  TelemetryTracker(FindingLog& log, int rank) : log_(log), rank_(rank) {}
  void add(const TelemetrySample& s);
  // Closes the throttle episodes (steps clamped to `last_step`) and reports them.
  void finish(int64_t last_step);
  // {"samples", "device_count_before", "device_count_after", "before", "after", "extremes", "throttle_episodes"}
  nlohmann::json report() const;

 private:
  struct Episode {
    int64_t first_step = 0, last_step = 0;
    double first_t_s = 0, last_t_s = 0;
    uint64_t status_bits = 0;  // OR of the throttle_status values seen
    bool open = true;
  };
  struct GpuState {
    nlohmann::json first, last;
    bool responded = false, reported_gone = false;
    std::vector<Episode> episodes;
  };
  void check_counter(const nlohmann::json& gpu, GpuState& state, const TelemetrySample& s, const char* key,
                     const char* signature, Severity severity);
  void gone(uint32_t index, GpuState& state, const TelemetrySample& s, const std::string& why);

  FindingLog& log_;
  const int rank_;
  int64_t samples_ = 0;
  std::optional<uint32_t> count_before_, count_after_;
  std::map<uint32_t, GpuState> gpus_;
  std::map<uint32_t, std::map<std::string, std::pair<double, double>>> extremes_;  // key -> (min, max)
};

// Runs on the node's first local rank: samples SMI every diagnostics.telemetry_interval_s on its
// own thread (so a throttle during a long step is still seen) into telemetry.jsonl
// (telemetry.rank<N>.jsonl off rank 0) and reads the kernel log at the same pace.
class NodeMonitor final : public StepObserver {
 public:
  NodeMonitor(const DiagnosticsConfig& diag, FindingLog& log, std::filesystem::path output_dir, int rank);
  ~NodeMonitor() override;
  NodeMonitor(const NodeMonitor&) = delete;
  NodeMonitor& operator=(const NodeMonitor&) = delete;

  void start();  // the "before" sample, then the thread
  // The "after" sample, the last kernel log lines, the throttle findings; idempotent.
  void stop();
  // For a hang: reads the kernel log (the reset line is the evidence) without waiting for a
  // sampler that may be stuck in a driver call.
  void drain_kernel_log();
  void on_step(const StepRecord& r) override { step_.store(r.step); }
  // Records telemetry and kernel_log as running or not (after start()).
  void record_coverage(RunCoverage& coverage) const;
  // {"telemetry": ..., "kernel_log": ...} as of the last finished round.
  nlohmann::json report_sections() const;
  // The last round in brief for metrics.jsonl: {"t_s", "step", "gpus": [{"index", temperatures,
  // "power_w", clocks, "throttle_status"}]}; null before the first round or without telemetry.
  nlohmann::json latest_sample() const;

 private:
  void loop();
  void sample_round();
  void read_kernel_log();

  const double interval_s_;
  FindingLog& log_;
  const int rank_;
  const std::filesystem::path jsonl_path_;
  std::atomic<int64_t> step_{0};
  std::chrono::steady_clock::time_point started_;

  const SmiLibrary& smi_;  // amd-smi, else ROCm SMI
  std::mutex smi_mutex_;   // the tracker and telemetry.jsonl
  std::ofstream jsonl_;
  TelemetryTracker tracker_;
  bool telemetry_on_ = false;

  std::mutex kernel_mutex_;
  OpenedKernelLog kernel_log_;
  int64_t kernel_matches_ = 0;

  mutable std::mutex report_mutex_;
  nlohmann::json report_ = nlohmann::json::object();
  nlohmann::json latest_;

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, stopped_ = false;
  std::thread thread_;
};

}  // namespace rcl
