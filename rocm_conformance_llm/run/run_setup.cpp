#include "rocm_conformance_llm/run/run_setup.hpp"

#include <unistd.h>

#include <cmath>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/data.hpp"
#include "rocm_conformance_llm/model.hpp"
#include "rocm_conformance_llm/platform/device.hpp"
#include "rocm_conformance_llm/platform/doctor.hpp"
#include "rocm_conformance_llm/platform/rocm_knobs.hpp"
#include "rocm_conformance_llm/run/cli.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/network_preflight.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"
#include "rocm_conformance_llm/workload/precision.hpp"

namespace rcl {
namespace fs = std::filesystem;

namespace {

// The output directory must be one this process can create files in; checked before anything
// runs, so every later failure has somewhere to put its report.
void check_output_dir(const std::string& dir) {
  fs::path existing = fs::absolute(dir);
  while (!fs::exists(existing) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  if (!fs::is_directory(existing))
    throw ConfigError("--output-dir '" + dir + "': " + existing.string() + " exists and is not a directory");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw ConfigError("--output-dir '" + dir + "': " + existing.string() + " is not writable");
}

void find_resume_point(const RunConfig& run, RunSetup& s) {
  if (run.resume == kResumeAuto) {
    s.resume_from = resolve_resume_auto(run.output_dir, identity_of(run, s.launch.world_size));
    s.resume_in_place = true;  // its own directory: a checkpoint of it, or an earlier attempt without one
  } else if (!run.resume.empty()) {
    s.resume_from = resolve_resume(run.resume, run.output_dir, identity_of(run, s.launch.world_size));
    std::error_code ec;
    s.resume_in_place = fs::equivalent(s.resume_from->dir.parent_path().parent_path(), run.output_dir, ec);
  }
}

// The data is readable (every part of a blend, one tokenizer among them, each long enough for
// its windows; an indexed dataset whole: its index, its sizes, every id within the model's
// vocabulary, so a bad shard is refused before anything is written, not at the step that reads
// it), and the output directory holds no other run: its reports may be someone's baseline, so a
// run writes there only when asked to. The data stays open for the trainer, and what a
// checkpoint's export carries of its tokenizer is read now, once.
void check_files(const RunConfig& run, RunSetup& s, bool overwrite) {
  if (!run.training.data_path.empty()) {
    s.data = open_data(run.training);
    for (const auto& part : s.data->parts) part.store->check_ids();
  }
  s.hf_tokenizer = std::make_shared<const HfTokenizer>(read_hf_tokenizer(run.training));
  if (s.launch.rank == 0 && fs::exists(fs::path(run.output_dir) / "config.json") && !overwrite && !s.resume_in_place)
    throw ConfigError("--output-dir '" + run.output_dir +
                      "' already holds a run (config.json); choose a new directory or pass --overwrite");
}

// The device, what it must serve (the attention backend) and the model-parallel degrees fitted
// to the world (fallbacks recorded, never a crash).
void select_device(const RunConfig& run, RunSetup& s) {
  const std::string gemm_env = prepare_gemm_environment(determinism_of(run.training) != Determinism::off);
  s.device = resolve_device(run.training.device, s.launch.local_rank);
  if (!gemm_env.empty()) spdlog::info("deterministic mode: set {} before the first GEMM", gemm_env);
  check_attention_backend(run.training, s.device.type());
  s.group = plan_group(run.training, s.launch.world_size);
  // Before the model runs a GEMM: on a CPU without a native bf16/fp16 kernel they run in float32.
  const AutocastState autocast = autocast_for(run.training.mixed_precision);
  s.reduced_gemm =
      choose_reduced_gemm(s.device, autocast.enabled ? autocast.dtype : c10::kFloat, CpuGemmFacts::of_this_process());
  set_reduced_gemm_in_float32(s.reduced_gemm.dtype, s.reduced_gemm.in_float32);
}

// Threads, allocator and ROCm knobs, then the environment as the run will meet it.
void prepare_host(const RunConfig& run, RunSetup& s) {
  // On a GPU the host threads only feed the device; on CPU the ranks of one host share its cores
  // (world size is the upper bound of ranks per host).
  configure_cpu_threads(run.training.num_threads, s.device.is_cuda() ? 1 : s.launch.world_size, !s.device.is_cuda());
  tune_host_allocator();
  // Again now that the output directory is known (rocm.miopen_user_db=per-run); main applied
  // the rest before the first HIP call.
  s.rocm_knobs = apply_rocm_knobs(run.rocm, run.output_dir);
  for (const auto& [variable, knob] : s.rocm_knobs.items())
    if (knob.contains("replaced"))
      spdlog::warn("rocm config replaces {}={} from the environment with {}", variable,
                   knob.at("replaced").get<std::string>(), knob.at("value").get<std::string>());
  s.environment = environment_report(s.device);
  DoctorInputs doctor = doctor_inputs_of_this_process();
  doctor.device = s.device;
  s.doctor = doctor_to_json(run_doctor(doctor));
}

}  // namespace

RunIdentity identity_of(const RunConfig& run, int world_size) {
  return {nlohmann::json(run.training), run.stress_modes, world_size};
}

RunSetup setup_run(const RunConfig& run, bool overwrite) {
  RunSetup s;
  s.launch = detect_launch();
  init_logging(s.launch.rank, s.launch.world_size, run.training.log_per_rank);
  s.faults = FaultPlan::parse(run.inject);
  check_output_dir(run.output_dir);
  check_for_world(run, s.launch.world_size, s.faults);
  find_resume_point(run, s);
  check_files(run, s, overwrite);
  if (!run.baseline_dir.empty()) s.baseline = load_run_record(run.baseline_dir);
  select_device(run, s);
  // The rendezvous waits this long for rank 0; so does the preflight's probe of it.
  s.network = check_network(s.launch, collective_backend(s.device), s.group.collective_timeout);
  prepare_host(run, s);
  return s;
}

}  // namespace rcl
