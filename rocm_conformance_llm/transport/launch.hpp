// Who launched this process and where its peers rendezvous: torchrun, Slurm's srun, Open MPI's
// mpirun, or nobody (one process). A pure function of an environment lookup, so tests feed
// synthetic environments; no GPU count is assumed anywhere, the launcher decides the world.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace rcl {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // index on this node: picks the GPU
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // "torchrun" | "slurm" | "mpirun" | "none"
  // Set when the launcher itself serves the rendezvous store at master_port: torchrun's static
  // rendezvous (and its c10d one since 2.4) says so with TORCHELASTIC_USE_AGENT_STORE=True.
  // Then rank 0 is a client like the others, under this restart attempt's key prefix.
  std::optional<std::string> launcher_store_prefix;

  bool distributed() const { return world_size > 1; }
};

// Returns the variable's value, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// First match wins: torchrun (RANK/WORLD_SIZE), srun (SLURM_PROCID), mpirun
// (OMPI_COMM_WORLD_RANK), else one process. Non-numeric or inconsistent values throw
// ConfigError naming the variable.
LaunchInfo parse_launch(const EnvLookup& env);
LaunchInfo detect_launch();  // parse_launch over the process environment

// First host of a Slurm node list in compressed form: "node[01-04,07],gpu5" -> "node01",
// "rack[2-3]-n[08-09]" -> "rack2-n08". ConfigError (naming `variable`) when malformed.
std::string first_slurm_host(const std::string& nodelist, const std::string& variable);

}  // namespace rcl
