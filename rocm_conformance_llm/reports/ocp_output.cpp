#include "rocm_conformance_llm/reports/ocp_output.hpp"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/checks/detectors/catalog.hpp"

namespace rcl {

namespace {
using json = nlohmann::json;

constexpr const char* kDeviceHardwareId = "hw-device";
constexpr const char* kLibtorchSoftwareId = "sw-libtorch";
constexpr const char* kToolSoftwareId = "sw-rocm-conformance-llm";

// RFC 3339 in UTC with milliseconds, as the spec's timestamps are.
std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", text, static_cast<int>(ms % 1000));
}

// The softwareInfoId of a ROCm component: its place in component::all.
std::string component_software_id(const std::string& component) {
  for (size_t i = 0; i < std::size(component::all); ++i)
    if (component == component::all[i]) return fmt::format("sw-component-{}", i);
  return {};
}

// Stamps each artifact with its sequence number and time as it is added.
class Stream {
 public:
  void add(std::chrono::system_clock::time_point t, json artifact) {
    artifact["sequenceNumber"] = static_cast<int64_t>(out_.size());
    artifact["timestamp"] = rfc3339(t);
    out_.push_back(std::move(artifact));
  }
  void step(std::chrono::system_clock::time_point t, const std::string& id, json body) {
    body["testStepId"] = id;
    add(t, {{"testStepArtifact", std::move(body)}});
  }
  std::vector<json> take() { return std::move(out_); }

 private:
  std::vector<json> out_;
};

json dut_info(const json& report, const std::string& hostname) {
  const json& env = report.value("environment", json::object());
  json software = json::array();
  for (const char* component : component::all) {
    json info = {{"softwareInfoId", component_software_id(component)}, {"name", component}, {"softwareType", "SYSTEM"}};
    // The one ROCm library whose version the run reads (platform/rocm_dlopen.hpp).
    const json& hip = env.value("hip_runtime", json::object());
    if (std::string(component) == component::hip_runtime && hip.value("available", false))
      info["version"] = std::to_string(hip.value("runtime_version", 0));
    software.push_back(std::move(info));
  }
  software.push_back({{"softwareInfoId", kLibtorchSoftwareId},
                      {"name", "libtorch"},
                      {"version", env.value("libtorch_version", std::string("unknown"))},
                      {"softwareType", "SYSTEM"}});
  software.push_back({{"softwareInfoId", kToolSoftwareId},
                      {"name", "rocm-conformance-llm"},
                      {"version", RCL_SOURCE_VERSION},
                      {"softwareType", "APPLICATION"}});
  const std::string device = env.value("device", std::string("unknown"));
  json hardware = {{"hardwareInfoId", kDeviceHardwareId}, {"name", device}, {"computerSystem", hostname}};
  // Which rank's device: its PCI bus id where known, else the world and local rank.
  if (const json& id = report.value("identity", json::object()); !id.empty()) {
    const std::string bus = id.value("pci_bus_id", std::string());
    hardware["location"] = !bus.empty() ? bus
                                        : fmt::format("world rank {}, local rank {}", id.value("world_rank", 0),
                                                      id.value("local_rank", 0));
  }
  return {{"dutInfoId", hostname.empty() ? "host" : hostname},
          {"name", hostname},
          {"platformInfos", json::array({{{"info", fmt::format("{} ({}, libtorch {} {} build)", device,
                                                               env.value("device_kind", std::string("unknown")),
                                                               env.value("libtorch_version", std::string("?")),
                                                               env.value("libtorch_build", std::string("?")))}}})},
          {"softwareInfos", software},
          {"hardwareInfos", json::array({hardware})}};
}

json measurement(const std::string& name, const json& value, const std::string& unit) {
  return {{"measurement", {{"name", name}, {"value", value}, {"unit", unit}, {"hardwareInfoId", kDeviceHardwareId}}}};
}

// The median bus bandwidth of each collective op over the run's metrics.jsonl.
std::map<std::string, double> collective_bandwidths(const std::filesystem::path& metrics_path) {
  std::map<std::string, std::vector<double>> samples;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    const json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;
    for (const auto& c : record.value("collectives", json::array()))
      if (c.contains("bus_bandwidth_gbps") && c["bus_bandwidth_gbps"].is_number())
        samples[c.value("op", std::string("collective"))].push_back(c["bus_bandwidth_gbps"].get<double>());
  }
  std::map<std::string, double> out;
  for (auto& [op, values] : samples) {
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    out[op] = values[values.size() / 2];
  }
  return out;
}

// A finding as a diagnosis: fail is FAIL, warn UNKNOWN (it asks a person to look), info PASS.
json diagnosis_of(const json& finding) {
  const std::string severity = finding.value("severity", std::string("info"));
  const std::string component = finding.value("component", std::string());
  json d = {{"verdict", finding.value("signature", std::string("finding"))},
            {"type", severity == "fail"   ? "FAIL"
                     : severity == "warn" ? "UNKNOWN"
                                          : "PASS"},
            {"message", fmt::format("[{}] {} (step {}, rank {}, action {})", component,
                                    finding.value("message", std::string()), finding.value("step", int64_t{0}),
                                    finding.value("rank", 0), finding.value("action", std::string("none")))},
            {"hardwareInfoId", kDeviceHardwareId}};
  // The schema's diagnosis names hardware only: the ROCm component, a softwareInfo's name, goes
  // in its subcomponent.
  if (!component.empty()) d["subcomponent"] = {{"name", component}};
  return d;
}

void training_step(Stream& s, const OcpRunInfo& info, const json& report, const std::filesystem::path& metrics_path,
                   const std::vector<json>& findings) {
  const std::string id = "step-training";
  s.step(info.ended, id, {{"testStepStart", {{"name", "training"}}}});
  const json& summary = report.value("summary", json::object());
  s.step(info.ended, id, measurement("steps", summary.value("steps", int64_t{0}), "steps"));
  if (summary.contains("tokens_per_s"))
    s.step(info.ended, id, measurement("tokens_per_second", summary["tokens_per_s"].value("overall", 0.0), "tokens/s"));
  if (summary.contains("step_time_s")) {
    s.step(info.ended, id, measurement("step_time_median", summary["step_time_s"].value("median", 0.0), "s"));
    s.step(info.ended, id, measurement("step_time_p95", summary["step_time_s"].value("p95", 0.0), "s"));
  }
  if (summary.contains("peak_memory") && summary["peak_memory"].value("bytes", int64_t{-1}) >= 0)
    s.step(info.ended, id,
           measurement("peak_memory_" + summary["peak_memory"].value("figure", std::string("bytes")),
                       summary["peak_memory"]["bytes"], "bytes"));
  for (const auto& [op, gbps] : collective_bandwidths(metrics_path))
    s.step(info.ended, id, measurement("collective_bus_bandwidth_" + op, gbps, "GB/s"));
  for (const auto& f : findings) s.step(info.ended, id, {{"diagnosis", diagnosis_of(f)}});
  const std::string outcome = report.value("outcome", std::string("completed"));
  if (outcome != "completed") {
    std::set<std::string> failing;
    for (const auto& f : report.value("findings", json::array()))
      if (f.value("severity", "") == "fail") failing.insert(component_software_id(f.value("component", "")));
    failing.erase("");
    s.step(info.ended, id,
           {{"error",
             {{"symptom", outcome},
              {"message", report.value("note", outcome)},
              {"softwareInfoIds", std::vector<std::string>(failing.begin(), failing.end())}}}});
  }
  s.step(info.ended, id, {{"testStepEnd", {{"status", outcome == "completed" ? "COMPLETE" : "ERROR"}}}});
}

void stress_mode_steps(Stream& s, const OcpRunInfo& info, const json& report) {
  const json& config = report.value("config", json::object());
  const json& skipped = config.value("stress_skipped", json::object());
  for (const auto& mode : config.value("stress_modes", json::array())) {
    const std::string name = mode.get<std::string>(), id = "step-stress-" + name;
    s.step(info.ended, id, {{"testStepStart", {{"name", "stress mode " + name}}}});
    const bool was_skipped = skipped.contains(name);
    if (was_skipped)
      s.step(info.ended, id,
             {{"log", {{"severity", "INFO"}, {"message", "skipped: " + skipped[name].get<std::string>()}}}});
    s.step(info.ended, id, {{"testStepEnd", {{"status", was_skipped ? "SKIP" : "COMPLETE"}}}});
  }
}

// One step per check the run set up; its findings, or a diagnosis per component it targets.
void check_steps(Stream& s, const OcpRunInfo& info, const json& report,
                 std::map<std::string, std::vector<json>>& by_check) {
  const json& coverage = report.value("coverage", json::object());
  std::map<std::string, json> component_coverage;
  for (const auto& c : coverage.value("components", json::array())) component_coverage[c.value("component", "")] = c;
  for (const auto& check : coverage.value("checks", json::array())) {
    const std::string name = check.value("check", std::string()), id = "step-check-" + name;
    const bool ran = check.value("ran", false) && check.value("steps", int64_t{0}) > 0;
    s.step(info.ended, id, {{"testStepStart", {{"name", "check " + name}}}});
    if (!ran) {
      s.step(info.ended, id,
             {{"log", {{"severity", "INFO"}, {"message", "not run: " + check.value("reason", std::string())}}}});
    } else if (const auto found = by_check.find(name); found != by_check.end()) {
      for (const auto& f : found->second) s.step(info.ended, id, {{"diagnosis", diagnosis_of(f)}});
      by_check.erase(found);
    } else {
      for (const auto& component : check.value("components", json::array())) {
        const json& c = component_coverage[component.get<std::string>()];
        const bool exercised = c.value("exercised", false);
        s.step(info.ended, id,
               {{"diagnosis",
                 {{"verdict", name + (exercised ? "-pass" : "-not-exercised")},
                  {"type", exercised ? "PASS" : "UNKNOWN"},
                  {"message", exercised ? fmt::format("{} watched {} steps: no finding", name, check.value("steps", 0))
                                        : c.value("reason", std::string("not exercised"))},
                  {"hardwareInfoId", kDeviceHardwareId},
                  {"subcomponent", {{"name", component}}}}}});
      }
    }
    s.step(info.ended, id, {{"testStepEnd", {{"status", ran ? "COMPLETE" : "SKIP"}}}});
  }
}

// PASS only for a ROCm component exercised without a fail finding; a fail finding is FAIL on any
// device; a run that exercised nothing, or did not finish, is NOT_APPLICABLE.
std::string run_result(const json& report) {
  for (const auto& f : report.value("findings", json::array()))
    if (f.value("severity", "") == "fail") return "FAIL";
  if (report.value("outcome", std::string()) != "completed") return "NOT_APPLICABLE";
  return report.value("exercised_rocm_components", json::array()).empty() ? "NOT_APPLICABLE" : "PASS";
}
}  // namespace

std::vector<json> ocp_artifacts(const json& report, const std::filesystem::path& metrics_path, const OcpRunInfo& info) {
  Stream s;
  s.add(info.started, {{"schemaVersion", {{"major", 2}, {"minor", 0}}}});
  const json& config = report.value("config", json::object());
  s.add(info.started, {{"testRunArtifact",
                        {{"testRunStart",
                          {{"name", "rocm-conformance-llm"},
                           {"version", RCL_SOURCE_VERSION},
                           {"commandLine", info.command_line},
                           {"parameters",
                            {{"preset", config.value("preset", json())},
                             {"stress_modes", config.value("stress_modes", json::array())},
                             {"world_size", config.value("world_size", 1)},
                             {"rank", report.value("rank", 0)},
                             {"training", config.value("training", json::object())}}},
                           {"dutInfo", dut_info(report, info.hostname)}}}}}});

  std::map<std::string, std::vector<json>> by_check;
  for (const auto& f : report.value("findings", json::array()))
    by_check[detector_of_signature(f.value("signature", std::string()))].push_back(f);
  stress_mode_steps(s, info, report);
  check_steps(s, info, report, by_check);
  std::vector<json> rest;  // findings of no check step (the crash classifier's, a run-owned check's)
  for (const auto& [check, findings] : by_check) rest.insert(rest.end(), findings.begin(), findings.end());
  training_step(s, info, report, metrics_path, rest);

  const std::string outcome = report.value("outcome", std::string("completed"));
  s.add(info.ended,
        {{"testRunArtifact",
          {{"testRunEnd",
            {{"status", outcome == "completed" ? "COMPLETE" : "ERROR"}, {"result", run_result(report)}}}}}});
  return s.take();
}

namespace {
std::string rank_hardware_id(int world_rank) { return fmt::format("hw-rank-{}", world_rank); }

// A job report row's verdict as a diagnosis type: as a finding's severity would be.
const char* diagnosis_type(const std::string& verdict) {
  if (verdict == "PASS") return "PASS";
  return verdict == "WARN" ? "UNKNOWN" : "FAIL";
}
}  // namespace

std::vector<json> job_ocp_artifacts(const json& job, const OcpRunInfo& info) {
  json hardware = json::array();
  for (const auto& r : job.at("ranks")) {
    const std::string bus = r.value("pci_bus_id", std::string());
    hardware.push_back(
        {{"hardwareInfoId", rank_hardware_id(r.at("world_rank").get<int>())},
         {"name", r.value("device", std::string("unknown"))},
         {"computerSystem", r.value("host", std::string())},
         {"location", !bus.empty() ? bus
                                   : fmt::format("world rank {}, local rank {}", r.at("world_rank").get<int>(),
                                                 r.value("local_rank", 0))}});
  }
  Stream s;
  s.add(info.started, {{"schemaVersion", {{"major", 2}, {"minor", 0}}}});
  s.add(info.started,
        {{"testRunArtifact",
          {{"testRunStart",
            {{"name", "rocm-conformance-llm job"},
             {"version", RCL_SOURCE_VERSION},
             {"commandLine", info.command_line},
             {"parameters", {{"world_size", job.at("world_size")}, {"hosts", job.at("hosts").size()}}},
             {"dutInfo", {{"dutInfoId", "job"}, {"name", info.hostname}, {"hardwareInfos", hardware}}}}}}}});
  const std::string id = "step-job";
  s.step(info.ended, id, {{"testStepStart", {{"name", "job"}}}});
  for (const auto& r : job.at("ranks")) {
    const std::string verdict = r.at("verdict").get<std::string>();
    s.step(info.ended, id,
           {{"diagnosis",
             {{"verdict", "rank-" + verdict},
              {"type", r.at("source") == "report"    ? diagnosis_type(verdict)
                       : r.at("source") == "unknown" ? "UNKNOWN"  // a survivor's view without the store
                                                     : "FAIL"},
              {"message", fmt::format("rank {} on {}: {} (source {}, exit {}, last step {} {})",
                                      r.at("world_rank").get<int>(), r.value("host", std::string()), verdict,
                                      r.at("source").get<std::string>(), r.value("exit_code", -1),
                                      r.value("last_step", int64_t{0}), r.value("last_phase", std::string()))},
              {"hardwareInfoId", rank_hardware_id(r.at("world_rank").get<int>())}}}});
  }
  for (const auto& h : job.at("hosts")) {
    const std::string host = h.at("host").get<std::string>();
    std::string evidence;
    for (const auto& suspect : job.at("suspect_hosts"))
      if (suspect.at("host") == host)
        for (const auto& line : suspect.at("evidence"))
          evidence += (evidence.empty() ? "" : "; ") + line.get<std::string>();
    // A host none of whose ranks this view heard from is not cleared, only not named.
    const bool unheard = std::all_of(h.at("world_ranks").begin(), h.at("world_ranks").end(), [&](const json& rank) {
      return job.at("ranks").at(rank.get<size_t>()).at("source") == "unknown";
    });
    s.step(info.ended, id,
           {{"diagnosis",
             {{"verdict", !evidence.empty() ? "suspect-node" : unheard ? "node-unheard" : "node-not-suspect"},
              {"type", !evidence.empty() ? "FAIL" : unheard ? "UNKNOWN" : "PASS"},
              {"message", fmt::format("host {} (world ranks {}): {}", host, h.at("world_ranks").dump(),
                                      evidence.empty() ? "owns no decisive finding" : evidence)},
              {"hardwareInfoId", rank_hardware_id(h.at("world_ranks").at(0).get<int>())}}}});
  }
  for (const auto& f : job.at("findings")) {
    json d = diagnosis_of(f);
    d["hardwareInfoId"] = rank_hardware_id(f.value("rank", 0));
    s.step(info.ended, id, {{"diagnosis", std::move(d)}});
  }
  // A lost rank or a crash ends the job's step in ERROR; a fail finding is a completed FAIL.
  const std::string verdict = job.at("verdict").get<std::string>();
  const bool completed = verdict == "PASS" || verdict == "WARN" || verdict == "FAIL";
  s.step(info.ended, id, {{"testStepEnd", {{"status", completed ? "COMPLETE" : "ERROR"}}}});
  s.add(info.ended, {{"testRunArtifact",
                      {{"testRunEnd",
                        {{"status", completed ? "COMPLETE" : "ERROR"},
                         {"result", verdict == "PASS" || verdict == "WARN" ? "PASS" : "FAIL"}}}}}});
  return s.take();
}

std::string ocp_jsonl(const std::vector<json>& artifacts) {
  std::string out;
  for (const auto& a : artifacts) out += a.dump() + "\n";
  return out;
}

std::filesystem::path ocp_path(const std::filesystem::path& output_dir, int rank) {
  return output_dir / (rank == 0 ? std::string("ocp.jsonl") : fmt::format("ocp.rank{}.jsonl", rank));
}

std::string this_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string line, arg;
  while (std::getline(in, arg, '\0')) line += (line.empty() ? "" : " ") + arg;
  return line;
}

}  // namespace rcl
