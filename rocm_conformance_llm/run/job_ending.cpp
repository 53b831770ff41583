// How a run ends when it does not complete, and the sections every ending adds: a crash, a
// lost peer, a stop signal, a hang (Job, run/job_class.hpp).
#include <cstdlib>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/platform/datasheet_peaks.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/reports/throughput.hpp"
#include "rocm_conformance_llm/run/job_class.hpp"
#include "rocm_conformance_llm/run/signals.hpp"

namespace rcl {
namespace {

// How long a rank whose collective failed watches its peers' heartbeat files for a sign of life
// (kHeartbeatInterval is 1 s: a live peer, even on a loaded host, rewrites its file within it).
inline constexpr std::chrono::milliseconds kStalledPeerWindow{3000};

}  // namespace

void Job::exit_now(int code) {
  if (job_records_) job_records_->wait_for_finish(kAfterStop);
  spdlog::default_logger()->flush();
  std::_Exit(code);
}

int Job::crashed(const CollectiveError& e) {
  if (checks_.watchdog) checks_.watchdog->stop();
  stop_node_monitor();
  Finding finding = e.finding();
  if (finding.evidence.value("missing_ranks", nlohmann::json::array()).empty() && s_.launch.world_size > 1) {
    const auto stalled = stalled_peers(run_.output_dir, s_.launch.rank, s_.launch.world_size, kStalledPeerWindow);
    if (!stalled.empty()) {
      finding.evidence["missing_ranks"] = stalled;
      finding.evidence["missing_world_ranks"] = stalled;
      finding.evidence["named_by"] = "heartbeat files";
      finding.message +=
          fmt::format("; rank{} {} stopped updating {} (stopped or gone)", stalled.size() > 1 ? "s" : "",
                      fmt::join(stalled, ","), stalled.size() > 1 ? "their heartbeats" : "its heartbeat");
    }
  }
  records_.findings.add(finding);
  const int code = report().write(RunOutcome::crashed, finding.message);
  if (checks_.heartbeat) checks_.heartbeat->finish("crashed");
  exit_now(code);
}

int Job::crashed(std::string_view what) {
  if (checks_.watchdog) checks_.watchdog->stop();
  stop_node_monitor();
  spdlog::error("run crashed: {}", what);
  const int code = report().write_crash(what, current_phase());
  if (checks_.heartbeat) checks_.heartbeat->finish("crashed");
  return code;
}

int Job::interrupted(int sig, const std::string& phase, int64_t step) {
  node_sections_as_of_now();
  const auto lost = s_.launch.world_size > 1 ? lost_peers_now(run_.output_dir, s_.launch.rank, s_.launch.world_size)
                                             : std::vector<int>{};
  report().add_section("interruption", {{"signal", signals::name(sig)},
                                        {"phase", phase},
                                        {"step", step},
                                        {"missing_ranks", lost},
                                        {"missing_world_ranks", lost}});
  std::string message = fmt::format("stopped by {} in '{}' of step {}", signals::name(sig), phase, step);
  if (!lost.empty())
    message += fmt::format("; rank{} {} gone or stopped (heartbeat)", lost.size() > 1 ? "s" : "", fmt::join(lost, ","));
  return report().write(RunOutcome::interrupted, message);
}

void Job::stop_node_monitor() {
  if (checks_.node) checks_.node->stop();
  node_sections_as_of_now();
}

void Job::node_sections_as_of_now() {
  if (checks_.node) {
    checks_.node->drain_kernel_log();
    add_sections(checks_.node->report_sections());
  }
  if (checks_.memory_profile) report().add_section("memory_profile", checks_.memory_profile->to_json());
}

nlohmann::json Job::throughput() const {
  const auto steps = summarize_steps(records_.summary.steps(), run_.diagnostics.warmup_steps);
  return throughput_section(
      run_.training, {.tokens_per_s = steps.value("tokens_per_s", nlohmann::json::object()).value("overall", 0.0),
                      .measured_peak_tflops = run_.measured_peak_tflops,
                      .ranks_per_token = s_.group.layout.tensor_degree,
                      .device_model = s_.device.is_cpu() ? std::nullopt : gpu_model_name()});
}

void Job::add_sections(const nlohmann::json& sections) {
  for (const auto& [key, value] : sections.items()) report().add_section(key, value);
}

}  // namespace rcl
