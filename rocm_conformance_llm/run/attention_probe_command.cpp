// `probe attention`: the attention parity probe alone, on the configured model at its
// initialisation (run/job.hpp).
#include <iostream>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/checks/detectors/attention_probe.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/loop/trainer.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/run/job.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"
#include "rocm_conformance_llm/workload/memory_ballast.hpp"

namespace rcl {

int run_attention_probe(const RunConfig& run) {
  // stdout is the probe's JSON only: warnings (e.g. the reference BLAS, found on the GPU
  // machine's wheel) go to the console logger on stderr, before anything can warn.
  init_logging(0, 1, false);
  spdlog::set_level(spdlog::level::warn);
  const FaultPlan faults = FaultPlan::parse(run.inject);
  const torch::Device device = resolve_device(run.training.device, 0);
  check_attention_backend(run.training, device.type());
  configure_cpu_threads(run.training.num_threads, 1, !device.is_cuda());
  // Without the run's setup: no output directory, and the trainer opens the data and reads its
  // tokenizer itself.
  Trainer trainer(RunContext{.cfg = run.training,
                             .diag = run.diagnostics,
                             .device = device,
                             .output_dir = {},
                             .data = nullptr,
                             .hf_tokenizer = nullptr});
  const MemoryBallast ballast(run.training.memory_pressure_bytes, device);  // the run's memory pressure
  // As at the first step: a fault meant for later steps does not strike a one-shot probe.
  const auto probe = probe_trainer_attention(trainer, faults.fires(FaultKind::attention_mask_corrupt, 1, 0));
  const nlohmann::json report = attention_probe_report(trainer, probe);
  std::cout << report.dump(2) << "\n";
  return report.at("passed").get<bool>() ? kExitClean : kExitFailFinding;
}

}  // namespace rcl
