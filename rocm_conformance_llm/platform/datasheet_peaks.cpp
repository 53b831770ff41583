#include "rocm_conformance_llm/platform/datasheet_peaks.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

namespace rcl {

const std::vector<DatasheetPeak>& datasheet_peaks() {
  // Dense bf16: the vendors print "with sparsity" figures beside these, twice as large, which no
  // dense GEMM reaches. A longer name precedes the shorter one it contains.
  static const std::vector<DatasheetPeak> table = {
      {"MI355X", "AMD Instinct MI355X", 2516.6, "AMD Instinct MI355X data sheet (CDNA 4)"},
      {"MI350X", "AMD Instinct MI350X", 2306.9, "AMD Instinct MI350X data sheet (CDNA 4)"},
      {"MI325X", "AMD Instinct MI325X", 1307.4, "AMD Instinct MI325X data sheet (CDNA 3)"},
      {"MI300X", "AMD Instinct MI300X", 1307.4, "AMD Instinct MI300X data sheet (CDNA 3)"},
      {"MI300A", "AMD Instinct MI300A", 980.6, "AMD Instinct MI300A data sheet (CDNA 3)"},
      {"MI250X", "AMD Instinct MI250X", 383.0, "AMD Instinct MI250X data sheet (CDNA 2)"},
      {"MI250", "AMD Instinct MI250", 362.1, "AMD Instinct MI250 data sheet (CDNA 2)"},
      {"H200 NVL", "NVIDIA H200 NVL", 835.5, "NVIDIA H200 data sheet (1,671 TFLOPS with sparsity)"},
      {"H200", "NVIDIA H200 SXM", 989.4, "NVIDIA H200 data sheet (1,979 TFLOPS with sparsity)"},
      {"H100 NVL", "NVIDIA H100 NVL", 835.5, "NVIDIA H100 data sheet (1,671 TFLOPS with sparsity)"},
      {"H100 PCIe", "NVIDIA H100 PCIe", 756.5, "NVIDIA H100 data sheet (1,513 TFLOPS with sparsity)"},
      {"H100", "NVIDIA H100 SXM", 989.4, "NVIDIA H100 data sheet (1,979 TFLOPS with sparsity)"},
  };
  return table;
}

namespace {
std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Each GPU's `Model:` line in the NVIDIA driver's /proc tree (one folder per PCI bus id).
std::vector<std::string> nvidia_proc_models(const std::filesystem::path& root) {
  std::vector<std::string> models;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator(root, ec)) {
    std::ifstream in(gpu.path() / "information");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("Model:", 0) == 0) models.push_back(std::string(trim(line.substr(6))));
  }
  return models;
}

// The driver's GPU folders, named by PCI bus id, in bus order.
std::vector<std::string> nvidia_proc_bus_ids(const std::filesystem::path& root) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator(root, ec))
    if (gpu.is_directory(ec)) ids.push_back(lowercase(gpu.path().filename().string()));
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The physical index behind visible index `index`: CUDA_VISIBLE_DEVICES's `index`-th entry when it
// is a list of indices; nullopt for UUIDs, MIG names or an index it does not list.
std::optional<int> physical_index(int index, const std::optional<std::string>& visible) {
  if (!visible) return index;
  std::string_view rest = *visible;
  for (int position = 0; !rest.empty(); ++position) {
    const size_t comma = std::min(rest.find(','), rest.size());
    const auto value = parse_number<int>(trim(rest.substr(0, comma)));
    if (!value || *value < 0) return std::nullopt;  // not indices: this process cannot map it
    if (position == index) return *value;
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  return std::nullopt;
}
}  // namespace

std::optional<DatasheetPeak> find_datasheet_peak(const std::string& device_name) {
  const std::string name = lowercase(device_name);
  for (const auto& entry : datasheet_peaks())
    if (name.find(lowercase(entry.match)) != std::string::npos) return entry;
  return std::nullopt;
}

std::optional<std::string> gpu_model_name(const GpuModelSources& sources) {
  std::vector<std::string> models;
  if (sources.ask_hip)
    for (int index = 0; auto name = hip_device_name(index); ++index) models.push_back(*name);
  if (models.empty()) models = nvidia_proc_models(sources.nvidia_proc_root);
  const std::set<std::string> distinct(models.begin(), models.end());
  if (distinct.size() != 1) return std::nullopt;
  return *distinct.begin();
}

CudaDeviceOrder cuda_device_order_from_env() {
  const char* order = std::getenv("CUDA_DEVICE_ORDER");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return {order ? order : "", visible ? std::optional<std::string>(visible) : std::nullopt};
}

std::string gpu_pci_bus_id(int index, const GpuModelSources& sources, const CudaDeviceOrder& order) {
  if (sources.ask_hip)
    if (auto id = hip_device_pci_bus_id(index)) return lowercase(*id);
  if (order.device_order != "PCI_BUS_ID") return "";
  const auto physical = physical_index(index, order.visible_devices);
  const auto ids = nvidia_proc_bus_ids(sources.nvidia_proc_root);
  if (!physical || *physical >= static_cast<int>(ids.size())) return "";
  return ids[*physical];
}

}  // namespace rcl
