// A stand-in for librocm_smi64 that the telemetry tests load through $RCL_ROCM_SMI_LIBRARY.
// $FAKE_RSMI_SCRIPT names a text file with one sampling round per line, `key=value` words that
// apply to every device; each rsmi_num_monitor_devices call moves to the next line (the last one
// repeats). Keys: devices, temp_edge, temp_junction, temp_memory (C), power_w, power_cap_w,
// gfxclk, uclk (MHz), vram_used, vram_total (bytes), busy (%), ecc_ce, ecc_ue, replay, throttle,
// fail (1: every device query fails). rsmi_init prints what the real library prints on a machine
// without amdgpu, so the tests can check that it never reaches the console.
#include <rocm_smi/rocm_smi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Round = std::map<std::string, double>;

std::vector<Round> load_script() {
  std::vector<Round> rounds;
  const char* path = std::getenv("FAKE_RSMI_SCRIPT");
  std::ifstream in(path ? path : "");
  for (std::string line; std::getline(in, line);) {
    Round round;
    std::stringstream words(line);
    for (std::string word; words >> word;)
      if (const auto eq = word.find('='); eq != std::string::npos) round[word.substr(0, eq)] = std::stod(word.substr(eq + 1));
    if (!round.empty()) rounds.push_back(round);
  }
  if (rounds.empty()) rounds.push_back({{"devices", 1}});
  return rounds;
}

std::vector<Round> rounds;
size_t current = 0;

const Round& now() { return rounds[current < rounds.size() ? current : rounds.size() - 1]; }
double value(const char* key, double fallback = 0) {
  const auto it = now().find(key);
  return it == now().end() ? fallback : it->second;
}
rsmi_status_t answer(uint32_t index) {
  if (index >= value("devices", 1)) return RSMI_STATUS_INVALID_ARGS;
  return value("fail") != 0 ? RSMI_STATUS_NOT_SUPPORTED : RSMI_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

rsmi_status_t rsmi_init(uint64_t) {
  rounds = load_script();
  std::fprintf(stderr, "Failed to open drm root directory /sys/class/drm.\n");
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_num_monitor_devices(uint32_t* count) {
  static bool first = true;
  if (!first && current + 1 < rounds.size()) ++current;
  first = false;
  *count = static_cast<uint32_t>(value("devices", 1));
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_temp_metric_get(uint32_t index, uint32_t sensor, rsmi_temperature_metric_t, int64_t* temp) {
  const char* key = sensor == RSMI_TEMP_TYPE_EDGE ? "temp_edge" : sensor == RSMI_TEMP_TYPE_JUNCTION ? "temp_junction" : "temp_memory";
  *temp = static_cast<int64_t>(value(key, 40) * 1000);
  return answer(index);
}
rsmi_status_t rsmi_dev_power_ave_get(uint32_t index, uint32_t, uint64_t* power) {
  *power = static_cast<uint64_t>(value("power_w", 300) * 1e6);
  return answer(index);
}
rsmi_status_t rsmi_dev_power_cap_get(uint32_t index, uint32_t, uint64_t* cap) {
  *cap = static_cast<uint64_t>(value("power_cap_w", 750) * 1e6);
  return answer(index);
}
rsmi_status_t rsmi_dev_memory_usage_get(uint32_t index, rsmi_memory_type_t, uint64_t* used) {
  *used = static_cast<uint64_t>(value("vram_used", 1 << 30));
  return answer(index);
}
rsmi_status_t rsmi_dev_memory_total_get(uint32_t index, rsmi_memory_type_t, uint64_t* total) {
  *total = static_cast<uint64_t>(value("vram_total", 64.0 * (1 << 30)));
  return answer(index);
}
rsmi_status_t rsmi_dev_busy_percent_get(uint32_t index, uint32_t* busy) {
  *busy = static_cast<uint32_t>(value("busy", 90));
  return answer(index);
}
// HBM (UMC) carries the counts; the other blocks have no RAS here, as on many boards.
rsmi_status_t rsmi_dev_ecc_count_get(uint32_t index, rsmi_gpu_block_t block, rsmi_error_count_t* ec) {
  if (block != RSMI_GPU_BLOCK_UMC) return RSMI_STATUS_NOT_SUPPORTED;
  ec->correctable_err = static_cast<uint64_t>(value("ecc_ce"));
  ec->uncorrectable_err = static_cast<uint64_t>(value("ecc_ue"));
  return answer(index);
}
rsmi_status_t rsmi_dev_pci_replay_counter_get(uint32_t index, uint64_t* counter) {
  *counter = static_cast<uint64_t>(value("replay"));
  return answer(index);
}
rsmi_status_t rsmi_dev_gpu_metrics_info_get(uint32_t index, rsmi_gpu_metrics_t* m) {
  m->current_gfxclk = static_cast<uint16_t>(value("gfxclk", 2100));
  m->current_uclk = static_cast<uint16_t>(value("uclk", 1300));
  m->throttle_status = static_cast<uint32_t>(value("throttle"));
  return answer(index);
}

}  // extern "C"
