#include "rocm_conformance_llm/transport/launch.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

// Default rendezvous port when the launcher gives none (torch.distributed's default).
constexpr int kDefaultMasterPort = 29500;
// Slurm jobs sharing a node must not share a port: spread them over [29500, 31500), below
// Linux's ephemeral range (32768+) so an outgoing connection never holds the port.
constexpr int kSlurmPortSpread = 2000;

int parse_int(const std::string& name, const std::string& text) {
  if (const auto value = parse_number<int>(text)) return *value;
  throw ConfigError("invalid " + name + "='" + text + "': must be an integer");
}

std::optional<int> int_var(const EnvLookup& env, const std::string& name) {
  const auto text = env(name);
  if (!text) return std::nullopt;
  return parse_int(name, *text);
}

int required_int(const EnvLookup& env, const std::string& name, const std::string& launcher) {
  const auto value = int_var(env, name);
  if (!value) throw ConfigError(name + " is not set but the " + launcher + " launch needs it");
  return *value;
}

// The first variable of `names` that is set, with its name.
std::optional<std::pair<std::string, std::string>> first_set(const EnvLookup& env,
                                                             std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = env(name)) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

int parse_port(const std::string& name, const std::string& text) {
  const int port = parse_int(name, text);
  if (port < 1 || port > 65535) {
    throw ConfigError("invalid " + name + "=" + text + ": must be a TCP port in [1, 65535]");
  }
  return port;
}

// The launcher's rank, world size and local rank variables, all required; world size is checked
// first, then rank and local rank against it, naming the variable at fault.
LaunchInfo read_ranks(const EnvLookup& env, const std::string& launcher, const std::string& rank_var,
                      const std::string& world_var, const std::string& local_var) {
  LaunchInfo info;
  info.launcher = launcher;
  info.rank = required_int(env, rank_var, launcher);
  info.world_size = required_int(env, world_var, launcher);
  info.local_rank = required_int(env, local_var, launcher);
  if (info.world_size < 1) {
    throw ConfigError("invalid " + world_var + "=" + std::to_string(info.world_size) + ": must be >= 1");
  }
  if (info.rank < 0 || info.rank >= info.world_size) {
    throw ConfigError("invalid " + rank_var + "=" + std::to_string(info.rank) + ": must be in [0, " + world_var + "=" +
                      std::to_string(info.world_size) + ")");
  }
  if (info.local_rank < 0 || info.local_rank >= info.world_size) {
    throw ConfigError("invalid " + local_var + "=" + std::to_string(info.local_rank) + ": must be in [0, " + world_var +
                      "=" + std::to_string(info.world_size) + ")");
  }
  return info;
}

LaunchInfo from_torchrun(const EnvLookup& env) {
  LaunchInfo info = read_ranks(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK");
  const auto addr = env("MASTER_ADDR");
  const auto port = env("MASTER_PORT");
  if (info.distributed() && (!addr || addr->empty())) {
    throw ConfigError("MASTER_ADDR is not set but WORLD_SIZE=" + std::to_string(info.world_size) +
                      " needs a rendezvous host");
  }
  if (info.distributed() && !port) {
    throw ConfigError("MASTER_PORT is not set but WORLD_SIZE=" + std::to_string(info.world_size) +
                      " needs a rendezvous port");
  }
  if (addr) info.master_addr = *addr;
  if (port) info.master_port = parse_port("MASTER_PORT", *port);
  // The prefix torch.distributed's own workers use on the agent's store (rendezvous.py).
  if (env("TORCHELASTIC_USE_AGENT_STORE") == "True") {
    info.launcher_store_prefix =
        "/worker/attempt_" + std::to_string(required_int(env, "TORCHELASTIC_RESTART_COUNT", info.launcher));
  }
  return info;
}

LaunchInfo from_slurm(const EnvLookup& env) {
  // The step's task count is the world when srun runs a subset of the job's tasks.
  const std::string world_var = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  LaunchInfo info = read_ranks(env, "slurm", "SLURM_PROCID", world_var, "SLURM_LOCALID");

  if (const auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    info.master_addr = *addr;
  } else if (const auto nodes = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    info.master_addr = first_slurm_host(nodes->second, nodes->first);
  } else if (info.distributed()) {
    throw ConfigError("neither MASTER_ADDR nor SLURM_JOB_NODELIST is set: cannot find rank 0's host");
  }

  if (const auto port = env("MASTER_PORT")) {
    info.master_port = parse_port("MASTER_PORT", *port);
  } else if (const auto job_id = int_var(env, "SLURM_JOB_ID")) {
    info.master_port = kDefaultMasterPort + (*job_id % kSlurmPortSpread + kSlurmPortSpread) % kSlurmPortSpread;
  }
  return info;
}

LaunchInfo from_mpirun(const EnvLookup& env) {
  LaunchInfo info =
      read_ranks(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
  // mpirun says nothing about a rendezvous: loopback is right only when all ranks share a node.
  const auto local_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
  const auto addr = env("MASTER_ADDR");
  if (addr && !addr->empty()) {
    info.master_addr = *addr;
  } else if (local_size && *local_size < info.world_size) {
    throw ConfigError("mpirun across nodes (OMPI_COMM_WORLD_LOCAL_SIZE=" + std::to_string(*local_size) +
                      " < OMPI_COMM_WORLD_SIZE=" + std::to_string(info.world_size) +
                      ") needs MASTER_ADDR: pass -x MASTER_ADDR=<rank 0's host>");
  }
  if (const auto port = env("MASTER_PORT")) info.master_port = parse_port("MASTER_PORT", *port);
  return info;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist, const std::string& variable) {
  const auto malformed = [&](const std::string& why) {
    return ConfigError("invalid " + variable + "='" + nodelist + "': " + why);
  };
  std::string host;
  for (size_t i = 0; i < nodelist.size() && nodelist[i] != ',';) {
    if (nodelist[i] == ']') throw malformed("unbalanced ']'");
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    // A bracket group "[01-04,07]": its first entry, zero padding kept.
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) throw malformed("unbalanced '['");
    const std::string group = nodelist.substr(i + 1, close - i - 1);
    const std::string first = group.substr(0, group.find_first_of(",-"));
    if (first.empty() || !std::all_of(first.begin(), first.end(), [](unsigned char c) { return std::isdigit(c); })) {
      throw malformed("bracket range '[" + group + "]' must start with a number");
    }
    host += first;
    i = close + 1;
  }
  if (host.empty()) throw malformed("no host name");
  return host;
}

LaunchInfo parse_launch(const EnvLookup& env) {
  if (env("RANK") || env("WORLD_SIZE")) return from_torchrun(env);
  if (env("SLURM_PROCID")) return from_slurm(env);
  if (env("OMPI_COMM_WORLD_RANK")) return from_mpirun(env);
  return LaunchInfo{};
}

LaunchInfo detect_launch() {
  return parse_launch([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace rcl
