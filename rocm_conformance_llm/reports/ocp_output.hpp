// The verdict in the OCP Test and Validation output format (opencomputeproject/ocp-diag-core,
// json_spec, version 2.0), which fleet test executives read: JSON lines, each an artifact with
// its sequenceNumber and timestamp. schemaVersion first; testRunStart with the DUT (the device
// as hardwareInfo, one softwareInfo per ROCm component, libtorch and this tool); one test step
// for training (its measurements), one per stress mode asked for (SKIP when skipped) and one per
// check (SKIP when it did not run; a diagnosis per finding, or per component it targets); then
// testRunEnd. The mapping: docs/outputs.md "ocp.jsonl".
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rcl {

struct OcpRunInfo {
  std::string command_line;
  std::string hostname;
  std::chrono::system_clock::time_point started, ended;
};

// Every artifact of the run, in order, from report.json's content (`report`) and the run's
// metrics.jsonl (`metrics_path`, for collective bandwidths; may be missing).
std::vector<nlohmann::json> ocp_artifacts(const nlohmann::json& report, const std::filesystem::path& metrics_path,
                                          const OcpRunInfo& info);

// The job's verdict in the same format (job_ocp.jsonl beside job_report.json), from the job
// report's document: a hardwareInfo per rank (its host the computerSystem), one test step "job"
// with a diagnosis per rank and per host (FAIL for a suspect node, naming its evidence) and one
// per job finding (the odd node out), and the job's result.
std::vector<nlohmann::json> job_ocp_artifacts(const nlohmann::json& job_report, const OcpRunInfo& info);

// The artifacts as JSON lines.
std::string ocp_jsonl(const std::vector<nlohmann::json>& artifacts);

// "ocp.jsonl" on rank 0, "ocp.rank<N>.jsonl" elsewhere.
std::filesystem::path ocp_path(const std::filesystem::path& output_dir, int rank);

// This process's command line, its arguments joined by spaces (from /proc/self/cmdline).
std::string this_command_line();

}  // namespace rcl
