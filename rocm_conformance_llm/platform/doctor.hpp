// `rocm-conformance-llm doctor`: the node's ROCm environment as a checklist, a PASS/WARN/FAIL line
// per check with a suggestion where a known pitfall applies (docs/doctor.md). Every run records
// the same checks in config.json ("doctor").
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

namespace rcl {

// What the checks read, so the tests can craft it.
struct DoctorInputs {
  std::map<std::string, std::string> env;  // the process environment
  std::string cmdline_path = "/proc/cmdline";
  std::string kfd_topology = "/sys/class/kfd/kfd/topology/nodes";
  torch::Device device{torch::kCPU};  // where the fp16/bf16 probes run
};
// The real environment, /proc/cmdline, the KFD topology and the GPU when libtorch sees one.
DoctorInputs doctor_inputs_of_this_process();

struct DoctorCheck {
  std::string name;
  std::string status;  // "pass" | "warn" | "fail"
  std::string value;   // what was found
  std::string suggestion;
};

std::vector<DoctorCheck> run_doctor(const DoctorInputs& in);
// {"status": worst, "counts": {pass, warn, fail}, "checks": [{name, status, value, suggestion?}]}
nlohmann::json doctor_to_json(const std::vector<DoctorCheck>& checks);
std::string doctor_text(const std::vector<DoctorCheck>& checks);
// GPU ISA names of the KFD topology's GPU nodes, e.g. {"gfx942", "gfx942"}.
std::vector<std::string> kfd_gpu_archs(const std::string& topology_dir);

}  // namespace rcl
