// MFU as report.json states it: the two FLOP counts (the model's, with attention's full square,
// and the useful causal triangle), the experts a token skips left out of both, the datasheet
// table's lookup by device name, and the GPU model read from the NVIDIA driver's /proc files.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/platform/datasheet_peaks.hpp"
#include "rocm_conformance_llm/reports/throughput.hpp"

namespace rcl {
namespace {
namespace RCL_UNITY_ID {

TrainingConfig gpt2_small_shape() {
  TrainingConfig cfg;
  cfg.hidden_size = 768;
  cfg.num_layers = 12;
  cfg.num_heads = 12;
  cfg.seq_len = 1024;
  cfg.vocab_size = 50257;
  return cfg;
}

// Query t (1-based) scores t keys: QK^T and AV cost 2 * 2 * hidden FLOPs per pair forward, three
// times that in training. Counted pair by pair, against the closed form.
TEST(Throughput, CausalFlopsCountTheTrianglePairByPair) {
  const TrainingConfig cfg = gpt2_small_shape();
  double pairs = 0;
  for (int64_t t = 1; t <= cfg.seq_len; ++t) pairs += double(t);
  const double per_token = 3.0 * 4.0 * double(cfg.hidden_size) * pairs / double(cfg.seq_len) * double(cfg.num_layers);
  const double square = 3.0 * 4.0 * double(cfg.hidden_size) * double(cfg.seq_len) * double(cfg.num_layers);
  EXPECT_DOUBLE_EQ(causal_flops_per_token(cfg) - per_token, flops_per_token(cfg) - square);
  EXPECT_LT(causal_flops_per_token(cfg), flops_per_token(cfg));
}

// A token goes through moe_top_k experts: experts it is not routed to add only their router rows.
TEST(Throughput, ExpertsATokenSkipsAddOnlyTheirRouterFlops) {
  TrainingConfig four = gpt2_small_shape();
  four.moe_experts = 4;
  four.moe_top_k = 2;
  TrainingConfig eight = four;
  eight.moe_experts = 8;
  EXPECT_GT(parameter_count(eight), parameter_count(four) + 4 * four.hidden_size);  // the weights are there
  EXPECT_DOUBLE_EQ(flops_per_token(eight) - flops_per_token(four), 6.0 * 12 * 4 * 768);
  EXPECT_DOUBLE_EQ(causal_flops_per_token(eight) - causal_flops_per_token(four), 6.0 * 12 * 4 * 768);
  // Top-1 of one expert is the dense MLP plus a one-column router.
  TrainingConfig one = four;
  one.moe_experts = 1;
  one.moe_top_k = 1;
  EXPECT_DOUBLE_EQ(flops_per_token(one) - flops_per_token(gpt2_small_shape()), 6.0 * 12 * 768);
}

TEST(Throughput, DatasheetPeaksAreFoundByTheNamesDevicesReport) {
  struct Case {
    const char* reported;
    const char* model;
  };
  for (const auto& c :
       {Case{"AMD Instinct MI300X", "AMD Instinct MI300X"}, Case{"AMD Instinct MI300X OAM", "AMD Instinct MI300X"},
        Case{"AMD Instinct MI325X", "AMD Instinct MI325X"}, Case{"AMD Instinct MI250X/MI250", "AMD Instinct MI250X"},
        Case{"AMD Instinct MI250", "AMD Instinct MI250"}, Case{"AMD Instinct MI355X", "AMD Instinct MI355X"},
        Case{"NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"}, Case{"NVIDIA H100 PCIe", "NVIDIA H100 PCIe"},
        Case{"NVIDIA H100 NVL", "NVIDIA H100 NVL"}, Case{"NVIDIA H200", "NVIDIA H200 SXM"},
        Case{"nvidia h200 nvl", "NVIDIA H200 NVL"}}) {
    const auto entry = find_datasheet_peak(c.reported);
    ASSERT_TRUE(entry) << c.reported;
    EXPECT_EQ(entry->model, c.model) << c.reported;
  }
  EXPECT_FALSE(find_datasheet_peak("AMD Radeon RX 7900 XTX"));
  EXPECT_FALSE(find_datasheet_peak(""));
  // Every entry is reachable: no shorter name ahead of a longer one that contains it.
  for (const auto& entry : datasheet_peaks()) EXPECT_EQ(find_datasheet_peak(entry.model)->model, entry.model);
}

// docs/performance.md prints the table; a row changed on one side only fails here.
TEST(Throughput, TheDocsTableIsTheCodes) {
  std::ifstream page(std::string(RCL_SOURCE_DIR) + "/docs/performance.md");
  std::vector<std::string> rows;
  for (std::string line; std::getline(page, line);)
    if (line.rfind("| AMD Instinct", 0) == 0 || line.rfind("| NVIDIA", 0) == 0) rows.push_back(line);
  ASSERT_EQ(rows.size(), datasheet_peaks().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& entry = datasheet_peaks()[i];
    EXPECT_EQ(rows[i], fmt::format("| {} | {:.1f} | {} |", entry.model, entry.bf16_dense_tflops, entry.source));
  }
}

class NvidiaProcTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("rcl-nvidia-proc-" + std::to_string(::getpid()) + "-" +
                                                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void add_gpu(const std::string& bus_id, const std::string& model) {
    std::filesystem::create_directories(root_ / bus_id);
    std::ofstream(root_ / bus_id / "information")
        << "Model: \t\t " << model << "\nIRQ:   \t\t 51\nBus Location: \t " << bus_id << "\n";
  }
  std::optional<std::string> model() const {
    return gpu_model_name({.nvidia_proc_root = root_.string(), .ask_hip = false});
  }
  std::filesystem::path root_;
};

TEST_F(NvidiaProcTree, OneModelOnEveryGpuNamesTheNode) {
  add_gpu("0000:18:00.0", "NVIDIA H100 80GB HBM3");
  add_gpu("0000:2a:00.0", "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(model(), "NVIDIA H100 80GB HBM3");
}

// GPU index -> bus id by the folders' sorted order, only where CUDA numbers the GPUs that way.
TEST_F(NvidiaProcTree, PciBusIdFollowsBusOrderOnlyWhereCudaCountsThatWay) {
  const GpuModelSources proc{.nvidia_proc_root = root_.string(), .ask_hip = false};
  const CudaDeviceOrder bus_order{"PCI_BUS_ID", std::nullopt};
  EXPECT_EQ(gpu_pci_bus_id(0, proc, bus_order), "");  // no driver tree
  add_gpu("0000:2a:00.0", "NVIDIA H100 80GB HBM3");
  add_gpu("0000:18:00.0", "NVIDIA H100 80GB HBM3");
  add_gpu("0000:c1:00.0", "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu_pci_bus_id(0, proc, bus_order), "0000:18:00.0");
  EXPECT_EQ(gpu_pci_bus_id(2, proc, bus_order), "0000:c1:00.0");
  EXPECT_EQ(gpu_pci_bus_id(3, proc, bus_order), "");
  // CUDA's default order (fastest first) is not the bus order: unknown, not a guess.
  EXPECT_EQ(gpu_pci_bus_id(0, proc, {"", std::nullopt}), "");
  EXPECT_EQ(gpu_pci_bus_id(0, proc, {"FASTEST_FIRST", std::nullopt}), "");
  // CUDA_VISIBLE_DEVICES renumbers: visible index 1 of "2,0" is physical GPU 0.
  EXPECT_EQ(gpu_pci_bus_id(1, proc, {"PCI_BUS_ID", "2,0"}), "0000:18:00.0");
  EXPECT_EQ(gpu_pci_bus_id(0, proc, {"PCI_BUS_ID", " 1"}), "0000:2a:00.0");
  EXPECT_EQ(gpu_pci_bus_id(2, proc, {"PCI_BUS_ID", "2,0"}), "");
  EXPECT_EQ(gpu_pci_bus_id(0, proc, {"PCI_BUS_ID", "GPU-8f3c2d1e"}), "");  // a UUID: not mappable here
}

TEST_F(NvidiaProcTree, MixedModelsOrNoneNameNothing) {
  EXPECT_FALSE(model());  // no driver tree at all
  add_gpu("0000:18:00.0", "NVIDIA H100 80GB HBM3");
  add_gpu("0000:2a:00.0", "NVIDIA H100 PCIe");
  EXPECT_FALSE(model());
}

TEST(Throughput, EachMfuIsStatedAgainstItsPeakOrSaysWhyNot) {
  TrainingConfig cfg = gpt2_small_shape();
  cfg.mixed_precision = Precision::bf16;
  const double tokens_per_s = 100000;
  const auto j = throughput_section(
      cfg, {.tokens_per_s = tokens_per_s, .measured_peak_tflops = 500, .device_model = "AMD Instinct MI300X"});
  const double model_tflops = flops_per_token(cfg) * tokens_per_s / 1e12;
  EXPECT_DOUBLE_EQ(j["achieved_tflops"]["model"].get<double>(), model_tflops);
  EXPECT_DOUBLE_EQ(j["mfu"]["measured_peak"]["model"].get<double>(), model_tflops / 500);
  EXPECT_DOUBLE_EQ(j["mfu"]["datasheet_peak"]["model"].get<double>(), model_tflops / 1307.4);
  EXPECT_LT(j["mfu"]["datasheet_peak"]["causal_useful"].get<double>(),
            j["mfu"]["datasheet_peak"]["model"].get<double>());
  EXPECT_EQ(j["mfu"]["datasheet_peak"]["table_model"], "AMD Instinct MI300X");
  EXPECT_TRUE(j["why_not"].empty());
  // Two tensor-parallel ranks count the same tokens and do half of each's work.
  const auto split =
      throughput_section(cfg, {.tokens_per_s = tokens_per_s, .measured_peak_tflops = 500, .ranks_per_token = 2});
  EXPECT_DOUBLE_EQ(split["mfu"]["measured_peak"]["model"].get<double>(), model_tflops / 500 / 2);

  // Nothing measured, a model the table lacks, an fp32 run: each figure absent, and why.
  const auto none = throughput_section(cfg, {.tokens_per_s = tokens_per_s, .device_model = "AMD Radeon PRO W7900"});
  EXPECT_TRUE(none["mfu"]["measured_peak"].is_null());
  EXPECT_TRUE(none["mfu"]["datasheet_peak"].is_null());
  EXPECT_NE(none["why_not"]["datasheet_peak"].get<std::string>().find("W7900"), std::string::npos);
  EXPECT_TRUE(none["why_not"].contains("measured_peak"));
  cfg.mixed_precision = Precision::fp32;
  const auto fp32 = throughput_section(cfg, {.tokens_per_s = tokens_per_s, .device_model = "NVIDIA H100 PCIe"});
  EXPECT_TRUE(fp32["mfu"]["datasheet_peak"].is_null());
  EXPECT_NE(fp32["why_not"]["datasheet_peak"].get<std::string>().find("fp32"), std::string::npos);
}

}  // namespace RCL_UNITY_ID
}  // namespace
}  // namespace rcl
