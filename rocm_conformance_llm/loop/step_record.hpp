// What one optimizer step produced: the single record the console log, metrics.jsonl and
// every step-level detector read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rocm_conformance_llm/platform/host_load.hpp"
#include "rocm_conformance_llm/platform/memory_sample.hpp"
#include "rocm_conformance_llm/transport/collective_sample.hpp"

namespace rcl {

struct StepRecord {
  int64_t step = 0;  // 1-based optimizer step
  int rank = 0;
  int world_size = 1;
  double loss = 0.0;  // mean training loss over the step's micro-batches
  double lr = 0.0;
  double grad_norm = 0.0;   // before clipping
  double loss_scale = 1.0;  // fp16 dynamic loss scale (1 otherwise)
  bool skipped = false;     // fp16: non-finite gradients, update skipped
  int64_t tokens = 0;       // tokens this rank processed in the step
  double step_time_s = 0.0;
  std::string step_time_clock = "host";  // "device": timed by device events (loop/trainer.cpp StepClock)
  double tokens_per_s = 0.0;             // this rank's tokens / step time
  MemorySample memory;
  HostLoadSample host;                    // what other processes took from the host during the step
  std::map<std::string, double> phase_s;  // data/forward/backward/grad_sync/optimizer when timed
  std::vector<CollectiveSample> collectives;
  std::optional<double> val_loss;
  std::map<std::string, int64_t> op_counts;  // ATen ops dispatched (when fingerprinting is on)
  // Blocking device-to-host reads from this step's start to the next one's (count_host_reads).
  std::optional<int64_t> host_reads;
};

// Anything that wants every finished step: the metrics writer, step-level detectors, the
// watchdog's heartbeat. Called on the training thread, once per optimizer step, in order.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step(const StepRecord& record) = 0;
};

}  // namespace rcl
