#include "rocm_conformance_llm/platform/doctor.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <torch/version.h>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

extern char** environ;

namespace rcl {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

const std::string* get(const Env& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

DoctorCheck passed(std::string name, std::string value) { return {std::move(name), "pass", std::move(value), ""}; }
DoctorCheck warned(std::string name, std::string value, std::string suggestion) {
  return {std::move(name), "warn", std::move(value), std::move(suggestion)};
}
DoctorCheck failed(std::string name, std::string value, std::string suggestion) {
  return {std::move(name), "fail", std::move(value), std::move(suggestion)};
}

std::string listed(const Env& env, const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    if (const auto* v = get(env, n)) out += (out.empty() ? "" : " ") + n + "=" + *v;
  return out.empty() ? "none set" : out;
}

DoctorCheck check_libtorch(const DoctorInputs&) {
  return passed("libtorch", fmt::format("{} ({} build)", TORCH_VERSION, RCL_TORCH_BUILD));
}

DoctorCheck check_hip_runtime(const DoctorInputs&) {
  const auto hip = hip_runtime_report();
  const std::string value = hip.value("available", false)
                                ? fmt::format("runtime {}, driver {}, {} device(s)", hip.value("runtime_version", 0),
                                              hip.value("driver_version", 0), hip.value("device_count", 0))
                                : hip.value("reason", std::string("unavailable"));
  if (hip.value("available", false)) return passed("hip_runtime", value);
  if (std::string(RCL_TORCH_BUILD) == "rocm")
    return failed("hip_runtime", value,
                  "a ROCm libtorch without a working HIP runtime: check the amdgpu driver (dkms), "
                  "/dev/kfd permissions (render/video groups) and the visible-devices variables");
  return warned("hip_runtime", value, "no HIP device here: only the CPU checks can run");
}

DoctorCheck check_visible_devices(const DoctorInputs& in) {
  const std::vector<std::string> names = {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"};
  const std::string value = listed(in.env, names);
  for (const auto& n : names)
    if (const auto* v = get(in.env, n); v && (v->empty() || *v == "-1"))
      return warned("visible_devices", value, n + " hides every GPU: unset it, or list the devices to use");
  const auto* hip = get(in.env, "HIP_VISIBLE_DEVICES");
  const auto* cuda = get(in.env, "CUDA_VISIBLE_DEVICES");
  if (hip && cuda && *hip != *cuda)
    return warned("visible_devices", value,
                  "HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES disagree; HIP uses the first, "
                  "launchers and scripts often set the second: set one");
  if (hip && get(in.env, "ROCR_VISIBLE_DEVICES"))
    return warned("visible_devices", value,
                  "with ROCR_VISIBLE_DEVICES set, HIP_VISIBLE_DEVICES indexes the devices ROCr "
                  "left, not the node's: prefer one of them");
  return passed("visible_devices", value);
}

DoctorCheck check_gpu_arch(const DoctorInputs& in) {
  const auto archs = kfd_gpu_archs(in.kfd_topology);
  if (archs.empty())
    return warned("gpu_arch", "no GPU in the KFD topology (" + in.kfd_topology + ")",
                  "no amdgpu device: the amdgpu driver is not loaded or this is not a ROCm node");
  const std::set<std::string> distinct(archs.begin(), archs.end());
  const std::string value = fmt::format("{} GPU(s): {}", archs.size(), join({distinct.begin(), distinct.end()}));
  if (const auto* override_version = get(in.env, "HSA_OVERRIDE_GFX_VERSION"))
    return warned(
        "gpu_arch", value + ", HSA_OVERRIDE_GFX_VERSION=" + *override_version,
        "kernels built for another ISA run on this one: unsupported on data-centre GPUs and a known source of "
        "wrong results; unset it where the GPU is supported");
  if (distinct.size() > 1)
    return warned("gpu_arch", value, "mixed GPU architectures on one node: a multi-GPU run mixes kernels and speeds");
  return passed("gpu_arch", value);
}

DoctorCheck check_pytorch_rocm_arch(const DoctorInputs& in) {
  const auto* arch = get(in.env, "PYTORCH_ROCM_ARCH");
  if (!arch) return passed("pytorch_rocm_arch", "not set");
  const auto archs = kfd_gpu_archs(in.kfd_topology);
  for (const auto& a : archs)
    if (arch->find(a) == std::string::npos)
      return warned("pytorch_rocm_arch", *arch,
                    "PYTORCH_ROCM_ARCH only matters when building PyTorch or extensions, and "
                    "it lacks this node's " +
                        a + ": a build made with it has no kernels here");
  return passed("pytorch_rocm_arch", *arch + " (build-time only)");
}

// A matmul in `dtype` against the same in float64: the GEMM path of that precision works.
DoctorCheck probe(const DoctorInputs& in, const char* name, torch::ScalarType dtype) {
  try {
    torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(7);
    const auto a = at::randn({64, 64}, gen, torch::kDouble), b = at::randn({64, 64}, gen, torch::kDouble);
    const auto reference = torch::matmul(a, b);
    const auto got = torch::matmul(a.to(in.device, dtype), b.to(in.device, dtype)).to(torch::kCPU, torch::kDouble);
    const double rel = ((got - reference).abs().max() / reference.abs().max()).item<double>();
    // 64-term dot products: bf16's 8-bit mantissa gives ~1e-2 relative error, fp16 ~1e-3.
    const double tolerance = dtype == torch::kBFloat16 ? 5e-2 : 1e-2;
    const std::string value = fmt::format("matmul on {}: max relative error {:.2g}", in.device.str(), rel);
    if (std::isfinite(rel) && rel <= tolerance) return passed(name, value);
    return failed(name, value,
                  fmt::format("above {:.0e}: this precision's GEMM is wrong here; run with "
                              "--stress gemm to see which shapes",
                              tolerance));
  } catch (const std::exception& e) {
    const std::string what = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    if (!in.device.is_cuda())
      return warned(name, "unsupported on " + in.device.str() + ": " + what, "use another precision on the CPU");
    return failed(name, what, "this GPU or libtorch build lacks the precision: use fp32 or another build");
  }
}

DoctorCheck check_alloc_conf(const DoctorInputs& in) {
  static const std::set<std::string> known = {"max_split_size_mb",
                                              "garbage_collection_threshold",
                                              "expandable_segments",
                                              "roundup_power2_divisions",
                                              "roundup_bypass_threshold_mb",
                                              "pinned_use_host_register",
                                              "pinned_use_hip_host_register",
                                              "pinned_use_cuda_host_register",
                                              "pinned_num_register_threads",
                                              "release_lock_on_hipmalloc",
                                              "release_lock_on_cudamalloc",
                                              "backend",
                                              "pinned_reserve_segment_size_mb",
                                              "per_process_memory_fraction",
                                              "graph_capture_record_stream_reuse",
                                              "max_non_split_rounding_mb"};
  const auto* hip = get(in.env, "PYTORCH_HIP_ALLOC_CONF");
  const auto* cuda = get(in.env, "PYTORCH_CUDA_ALLOC_CONF");
  const std::string value = listed(in.env, {"PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"});
  for (const auto* conf : {hip, cuda}) {
    if (!conf) continue;
    std::stringstream items(*conf);
    for (std::string item; std::getline(items, item, ',');) {
      const std::string key = item.substr(0, item.find(':'));
      if (!key.empty() && !known.count(key))
        return failed("allocator_conf", value,
                      "unknown allocator option '" + key + "': libtorch refuses it at the first device allocation");
    }
  }
  if (hip && cuda && *hip != *cuda)
    return warned("allocator_conf", value,
                  "both set and different: libtorch 2.x on ROCm reads PYTORCH_HIP_ALLOC_CONF, "
                  "1.13 the CUDA one; set one (or rocm.* allocator keys)");
  return passed("allocator_conf", value);
}

DoctorCheck check_blas(const DoctorInputs& in) {
  const auto* v = get(in.env, "TORCH_BLAS_PREFER_HIPBLASLT");
  if (!v) return passed("blas_backend", "TORCH_BLAS_PREFER_HIPBLASLT not set (libtorch's default)");
  if (*v == "0" || *v == "1") return passed("blas_backend", "TORCH_BLAS_PREFER_HIPBLASLT=" + *v);
  return warned("blas_backend", "TORCH_BLAS_PREFER_HIPBLASLT=" + *v, "use 0 (rocBLAS) or 1 (hipBLASLt)");
}

DoctorCheck check_tunableop(const DoctorInputs& in) {
  const std::string value = listed(in.env, {"PYTORCH_TUNABLEOP_ENABLED", "PYTORCH_TUNABLEOP_TUNING",
                                            "PYTORCH_TUNABLEOP_FILENAME", "PYTORCH_TUNABLEOP_NUMERICAL_CHECK"});
  const auto* enabled = get(in.env, "PYTORCH_TUNABLEOP_ENABLED");
  if (!enabled || *enabled != "1") return passed("tunableop", value);
  const auto* tuning = get(in.env, "PYTORCH_TUNABLEOP_TUNING");
  if ((!tuning || *tuning != "0") && !get(in.env, "PYTORCH_TUNABLEOP_FILENAME"))
    return warned("tunableop", value,
                  "tuning without PYTORCH_TUNABLEOP_FILENAME writes tunableop_results<N>.csv into "
                  "the working directory and re-tunes in every new one: set rocm.tunableop_results_file");
  return passed("tunableop", value);
}

DoctorCheck check_miopen(const DoctorInputs& in) {
  const std::string value = listed(in.env, {"MIOPEN_FIND_MODE", "MIOPEN_USER_DB_PATH"});
  static const std::set<std::string> modes = {"NORMAL", "FAST", "HYBRID", "DYNAMIC_HYBRID", "1", "2", "3", "5"};
  if (const auto* mode = get(in.env, "MIOPEN_FIND_MODE"); mode && !modes.count(*mode))
    return warned("miopen", value,
                  "MIOPEN_FIND_MODE=" + *mode + " is not a find mode (NORMAL, FAST, HYBRID, DYNAMIC_HYBRID)");
  const auto* db = get(in.env, "MIOPEN_USER_DB_PATH");
  if (!db)
    return warned("miopen", value,
                  "every job of this user shares ~/.config/miopen, and concurrent jobs corrupt it "
                  "(MIOpen#1878, #2214): set rocm.miopen_user_db=per-run or a per-node MIOPEN_USER_DB_PATH");
  std::error_code ec;
  if (fs::exists(*db, ec) && ::access(db->c_str(), W_OK) != 0)
    return failed("miopen", value, "MIOPEN_USER_DB_PATH is not writable: MIOpen cannot keep what it finds");
  return passed("miopen", value);
}

DoctorCheck check_sdma(const DoctorInputs& in) {
  const auto* v = get(in.env, "HSA_ENABLE_SDMA");
  if (!v) return passed("hsa_enable_sdma", "not set (SDMA engines on)");
  if (*v == "0") return passed("hsa_enable_sdma", "0 (blit kernels copy; the rocm-systems#7896 workaround)");
  if (*v == "1") return passed("hsa_enable_sdma", "1");
  return warned("hsa_enable_sdma", *v, "use 0 or 1");
}

DoctorCheck check_serialization(const DoctorInputs& in) {
  const std::string value = listed(in.env, {"AMD_SERIALIZE_KERNEL", "HIP_LAUNCH_BLOCKING", "AMD_LOG_LEVEL"});
  for (const char* name : {"AMD_SERIALIZE_KERNEL", "HIP_LAUNCH_BLOCKING"})
    if (const auto* v = get(in.env, name); v && *v != "0")
      return warned("debug_serialization", value,
                    std::string(name) +
                        " serialises kernels: right for debugging, but "
                        "step times and hangs then are not the production ones");
  return passed("debug_serialization", value);
}

DoctorCheck check_collectives_env(const DoctorInputs& in) {
  std::vector<std::string> names;
  for (const auto& [name, v] : in.env)
    if (name.rfind("NCCL_", 0) == 0 || name.rfind("RCCL_", 0) == 0 || name.rfind("TORCH_NCCL_", 0) == 0)
      names.push_back(name);
  const std::string value = listed(in.env, names);
  if (const auto* v = get(in.env, "RCCL_MSCCLPP_ENABLE"); v && *v == "1")
    return warned("rccl_env", value,
                  "MSCCL++ gave wrong all-reduce results with the LL protocol (TheRock#7871): "
                  "RCCL_MSCCLPP_ENABLE=0 unless it is the thing under test");
  if (const auto* v = get(in.env, "NCCL_P2P_DISABLE"); v && *v == "1")
    return warned("rccl_env", value, "NCCL_P2P_DISABLE=1 routes through host memory: slower, and it hides P2P faults");
  return passed("rccl_env", value);
}

DoctorCheck check_kernel_cmdline(const DoctorInputs& in) {
  std::ifstream file(in.cmdline_path);
  std::string cmdline;
  if (!file || !std::getline(file, cmdline))
    return warned("kernel_cmdline", "cannot read " + in.cmdline_path, "the IOMMU setting could not be checked");
  const auto gpus = kfd_gpu_archs(in.kfd_topology).size();
  std::set<std::string> words;
  std::stringstream ss(cmdline);
  for (std::string w; ss >> w;) words.insert(w);
  const bool passthrough = words.count("iommu=pt") || words.count("amd_iommu=off") || words.count("iommu=off");
  const std::string value = fmt::format("{} GPU(s); {}", gpus, passthrough ? "IOMMU pass-through/off" : "no iommu=pt");
  if (gpus > 1 && !passthrough)
    return warned("kernel_cmdline", value,
                  "multi-GPU runs hang in RCCL without iommu=pt (ROCm/rccl#1129, "
                  "ROCm/vllm#390): add iommu=pt to the kernel command line");
  return passed("kernel_cmdline", value);
}

}  // namespace

std::vector<std::string> kfd_gpu_archs(const std::string& topology_dir) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& node : fs::directory_iterator(topology_dir, ec)) {
    std::ifstream props(node.path() / "properties");
    std::string key;
    int64_t value = 0;
    while (props >> key >> value) {
      // gfx_target_version MMmmss: 90402 is gfx942, 90010 gfx90a; 0 marks a CPU node.
      if (key != "gfx_target_version" || value == 0) continue;
      const std::string name = node.path().filename().string();
      const int index = std::all_of(name.begin(), name.end(), ::isdigit) && !name.empty() ? std::stoi(name) : 0;
      found.emplace_back(index, fmt::format("gfx{}{}{:x}", value / 10000, (value / 100) % 100, value % 100));
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> archs;
  for (auto& [index, arch] : found) archs.push_back(std::move(arch));
  return archs;
}

DoctorInputs doctor_inputs_of_this_process() {
  DoctorInputs in;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) in.env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  in.device = gpu_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  return in;
}

std::vector<DoctorCheck> run_doctor(const DoctorInputs& in) {
  using Check = std::function<DoctorCheck(const DoctorInputs&)>;
  // A refused allocator configuration is thrown at the first device allocation, which the
  // probes would make: on the H100 machine (PyTorch 2.11 wheel) `doctor` died of SIGSEGV there
  // instead of reporting. Then the device probes are not run, and the report says why.
  const DoctorCheck alloc_conf = check_alloc_conf(in);
  const bool allocator_refused = alloc_conf.status == "fail" && in.device.is_cuda();
  const auto device_probe = [allocator_refused](const char* name, torch::ScalarType dtype) -> Check {
    return [=](const DoctorInputs& i) {
      if (allocator_refused)
        return warned(name,
                      "not run: libtorch would refuse the allocator configuration at this probe's first allocation",
                      "fix allocator_conf, then run doctor again");
      return probe(i, name, dtype);
    };
  };
  const std::vector<Check> checks = {check_libtorch,
                                     check_hip_runtime,
                                     check_visible_devices,
                                     check_gpu_arch,
                                     check_pytorch_rocm_arch,
                                     device_probe("fp16_probe", torch::kHalf),
                                     device_probe("bf16_probe", torch::kBFloat16),
                                     [&alloc_conf](const DoctorInputs&) { return alloc_conf; },
                                     check_blas,
                                     check_tunableop,
                                     check_miopen,
                                     check_sdma,
                                     check_serialization,
                                     check_collectives_env,
                                     check_kernel_cmdline};
  std::vector<DoctorCheck> out;
  for (const auto& check : checks) out.push_back(check(in));
  return out;
}

nlohmann::json doctor_to_json(const std::vector<DoctorCheck>& checks) {
  std::map<std::string, int> counts = {{"pass", 0}, {"warn", 0}, {"fail", 0}};
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : checks) {
    ++counts[c.status];
    nlohmann::json j = {{"name", c.name}, {"status", c.status}, {"value", c.value}};
    if (!c.suggestion.empty()) j["suggestion"] = c.suggestion;
    list.push_back(j);
  }
  const std::string status = counts["fail"] ? "fail" : counts["warn"] ? "warn" : "pass";
  return {{"status", status}, {"counts", counts}, {"checks", list}};
}

std::string doctor_text(const std::vector<DoctorCheck>& checks) {
  std::string out;
  for (const auto& c : checks) {
    std::string status = c.status;
    std::transform(status.begin(), status.end(), status.begin(), ::toupper);
    out += fmt::format("{:<5} {:<20} {}\n", status, c.name, c.value);
    if (!c.suggestion.empty()) out += fmt::format("      -> {}\n", c.suggestion);
  }
  return out;
}

}  // namespace rcl
