// The vendors' dense bf16 peaks of the GPUs this tool qualifies, and the name of the GPU model a
// run is on. A measured GEMM peak (--device-peak-tflops) says how close a run came to what the
// BLAS library delivers on this GPU; the datasheet peak says how close it came to what was paid
// for. Both figures go in the report, each named (docs/performance.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace rcl {

struct DatasheetPeak {
  std::string match;         // what a device name must contain: "MI300X", "H100 PCIe"
  std::string model;         // as the vendor names it: "AMD Instinct MI300X"
  double bf16_dense_tflops;  // dense (no structured sparsity) bf16 matrix peak; fp16's is the same
  std::string source;        // the vendor document it comes from
};

// The table, most specific names first (an "H100 PCIe" is matched before an "H100").
const std::vector<DatasheetPeak>& datasheet_peaks();

// The first entry whose `match` the device name contains (case-insensitive): "AMD Instinct MI300X
// OAM" -> MI300X, "NVIDIA H100 80GB HBM3" -> H100 SXM. nullopt: not in the table.
std::optional<DatasheetPeak> find_datasheet_peak(const std::string& device_name);

// Where the GPU model's name and PCI bus id are read from without a vendor API in the project:
// the HIP runtime through dlopen (ROCm), else the NVIDIA driver's /proc files (`Model:` in each
// GPU's `information`, the folders' names). The tests pose the /proc root.
struct GpuModelSources {
  std::string nvidia_proc_root = "/proc/driver/nvidia/gpus";
  bool ask_hip = true;
};
// The model of the node's GPUs when every GPU found names the same one; nullopt when none is
// found or they differ (a mixed node has no single datasheet peak).
std::optional<std::string> gpu_model_name(const GpuModelSources& sources = {});

// How CUDA numbers the GPUs a process sees: $CUDA_DEVICE_ORDER and $CUDA_VISIBLE_DEVICES.
struct CudaDeviceOrder {
  std::string device_order;
  std::optional<std::string> visible_devices;  // nullopt: unset, every GPU visible
};
CudaDeviceOrder cuda_device_order_from_env();
// The PCI bus id ("0000:c1:00.0") of the process's GPU `index`: the HIP runtime's, else the
// NVIDIA driver's /proc folders (one per bus id), the index-th in sorted order. That is CUDA's
// numbering only with CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest GPU first) and
// CUDA_VISIBLE_DEVICES unset or a list of indices; otherwise, or with no GPU, "" (unknown: a
// wrong bus id would send someone to drain the wrong GPU).
std::string gpu_pci_bus_id(int index, const GpuModelSources& sources = {},
                           const CudaDeviceOrder& order = cuda_device_order_from_env());

}  // namespace rcl
