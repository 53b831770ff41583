// A stand-in for librocm_smi64 that the telemetry tests load through $RCL_ROCM_SMI_LIBRARY.
// $FAKE_RSMI_SCRIPT names the script (fake_script.hpp); each rsmi_num_monitor_devices call after
// the first moves to its next line. Keys: devices, temp_edge, temp_junction, temp_memory (C),
// power_w, power_cap_w, gfxclk, uclk (MHz), vram_used, vram_total (bytes), busy (%), ecc_ce, ecc_ue, replay, throttle,
// fail (1: every device query fails). rsmi_init prints what the real library prints on a machine
// without amdgpu, so the tests can check that it never reaches the console.
#include <rocm_smi/rocm_smi.h>

#include <cstdio>

#include "fake_script.hpp"

namespace {

fake_smi::Script script;
double value(const char* key) { return script.value(key); }
rsmi_status_t answer(uint32_t index) {
  if (index >= value("devices")) return RSMI_STATUS_INVALID_ARGS;
  return script.answers(index) ? RSMI_STATUS_SUCCESS : RSMI_STATUS_NOT_SUPPORTED;
}

}  // namespace

extern "C" {

rsmi_status_t rsmi_init(uint64_t) {
  script.load("FAKE_RSMI_SCRIPT");
  std::fprintf(stderr, "Failed to open drm root directory /sys/class/drm.\n");
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_num_monitor_devices(uint32_t* count) {
  script.next_round();
  *count = static_cast<uint32_t>(value("devices"));
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_temp_metric_get(uint32_t index, uint32_t sensor, rsmi_temperature_metric_t, int64_t* temp) {
  const char* key = sensor == RSMI_TEMP_TYPE_EDGE       ? "temp_edge"
                    : sensor == RSMI_TEMP_TYPE_JUNCTION ? "temp_junction"
                                                        : "temp_memory";
  *temp = static_cast<int64_t>(value(key) * 1000);
  return answer(index);
}
rsmi_status_t rsmi_dev_power_ave_get(uint32_t index, uint32_t, uint64_t* power) {
  *power = static_cast<uint64_t>(value("power_w") * 1e6);
  return answer(index);
}
rsmi_status_t rsmi_dev_power_cap_get(uint32_t index, uint32_t, uint64_t* cap) {
  *cap = static_cast<uint64_t>(value("power_cap_w") * 1e6);
  return answer(index);
}
rsmi_status_t rsmi_dev_memory_usage_get(uint32_t index, rsmi_memory_type_t, uint64_t* used) {
  *used = static_cast<uint64_t>(value("vram_used"));
  return answer(index);
}
rsmi_status_t rsmi_dev_memory_total_get(uint32_t index, rsmi_memory_type_t, uint64_t* total) {
  *total = static_cast<uint64_t>(value("vram_total"));
  return answer(index);
}
rsmi_status_t rsmi_dev_busy_percent_get(uint32_t index, uint32_t* busy) {
  *busy = static_cast<uint32_t>(value("busy"));
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
  m->current_gfxclk = static_cast<uint16_t>(value("gfxclk"));
  m->current_uclk = static_cast<uint16_t>(value("uclk"));
  m->throttle_status = static_cast<uint32_t>(value("throttle"));
  return answer(index);
}

}  // extern "C"
