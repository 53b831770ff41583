// What a run is, decided before anything is written: the launch, the fault plan, the checkpoint
// to resume, the data (opened once, here), the baseline, the device, the host's threads and the
// ROCm knobs. Every ConfigError (exit 2) comes from here, but for a checkpoint that does not fit
// the model, which only the model can tell (the job's preflight, still before the first file): a
// rejected run leaves no file behind.
#pragma once

#include <memory>
#include <optional>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/faults/fault_plan.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/reports/baseline.hpp"
#include "rocm_conformance_llm/run/run_checkpoint.hpp"
#include "rocm_conformance_llm/run/run_config.hpp"
#include "rocm_conformance_llm/transport/launch.hpp"
#include "rocm_conformance_llm/transport/subgroups.hpp"
#include "rocm_conformance_llm/workload/hf_names.hpp"

namespace rcl {

struct RunSetup {
  LaunchInfo launch;
  FaultPlan faults;
  std::optional<RunRecord> baseline;
  torch::Device device{torch::kCPU};
  nlohmann::json environment;
  std::optional<ResumePoint> resume_from;  // a verified checkpoint that fits this run
  bool resume_in_place = false;            // it is one of --output-dir's own checkpoints
  nlohmann::json rocm_knobs;               // the variables the rocm.* keys set (platform/rocm_knobs.hpp)
  nlohmann::json doctor;                   // the doctor's checks (platform/doctor.hpp)
  nlohmann::json network;                  // the network preflight's record (transport/network_preflight.hpp)
  GroupPlan group;                         // the parallel degrees this world allows, the collective timeout
  ReducedGemmPath reduced_gemm;            // how the bf16/fp16 GEMMs run here (platform/device.hpp)
  std::shared_ptr<const OpenedData> data;  // training.data_path's parts, opened and checked (null: synthetic)
  // What a checkpoint's export carries of the data's tokenizer, read once here.
  std::shared_ptr<const HfTokenizer> hf_tokenizer;
};

// Throws ConfigError (or CheckpointError) for a run that cannot start; `overwrite`: --overwrite.
RunSetup setup_run(const RunConfig& run, bool overwrite);

// What a checkpoint of this run must match to be resumed.
RunIdentity identity_of(const RunConfig& run, int world_size);

}  // namespace rcl
