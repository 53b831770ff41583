// The job report: rank 0's one view of the whole job (job_report.json, job_junit.xml,
// job_ocp.jsonl, job_report.html), built from a row per rank (gathered through the job's own
// c10d store by reports/job_records.hpp, so it needs no shared filesystem and still exists when
// a node dies: a lost rank's row is its last heartbeat through the store). From the rows: a
// roll-up per host, the suspect node(s) (the hosts whose ranks own the decisive findings), and
// the odd node out (a host whose ranks are all slower). Keys: docs/outputs.md.
#pragma once

#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/finding.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"
#include "rocm_conformance_llm/reports/run_summary.hpp"

namespace rcl {

class Communicator;

// Who a rank is: what every job-level row and finding names.
struct RankIdentity {
  int world_rank = 0;
  int local_rank = 0;
  std::string host{};
  std::string device{};      // "cpu", "cuda:1" (the GPU index)
  std::string pci_bus_id{};  // empty where no GPU (or the runtime does not say)
};
nlohmann::json to_json(const RankIdentity& id);
// "rank 3 (host nodeB, local rank 1, cpu)"
std::string describe(const RankIdentity& id);

// Signatures by which a rank reports a peer's failure, not its own: they name the peer.
bool about_a_peer(const std::string& signature);

// A finding of one rank, as the job report weighs it.
struct RowFinding {
  int rank = 0;  // the world rank it is attributed to
  std::string signature;
  Severity severity = Severity::warn;
  std::string message;
  std::vector<int> blames;  // world ranks it names as absent (missing_world_ranks)
};

// One rank's row. `source`: "report" (its own verdict), "heartbeat" (no verdict came: its last
// heartbeat through the store; the rank is lost), "none" (lost, and nothing of it came at all),
// "unknown" (a survivor's view without the store: its state could not be learned; not lost).
struct RankRow {
  RankIdentity id;
  std::string source = "report";
  std::string verdict;  // report.json's verdict; "LOST" for a row without one
  int exit_code = -1;   // -1: unknown (lost)
  int info = 0, warn = 0, fail = 0;
  int64_t steps = 0;  // steps timed (post-warm-up where there are some)
  std::optional<double> median_step_s, median_busy_s, tokens_per_s;
  std::optional<int64_t> peak_memory_bytes;
  int64_t last_step = 0;
  std::string last_phase;
  std::vector<RowFinding> findings;  // warn and fail ones
};
nlohmann::json to_json(const RankRow& row);
RankRow rank_row_from_json(const nlohmann::json& j);

// This rank's row from the steps it ran and its findings (`verdict`/`exit_code` empty/-1 for a
// heartbeat while it runs). Timing figures over post-warm-up steps (all when there are none).
RankRow rank_row(const RankIdentity& id, const std::vector<StepPoint>& steps, int64_t warmup_steps,
                 const std::vector<Finding>& findings, const std::string& phase);

struct HostRollup {
  std::string host{};
  std::vector<int> ranks{};
  std::string verdict{};  // the worst of its ranks'
  int info = 0, warn = 0, fail = 0, lost = 0;
  std::optional<double> median_step_s{}, median_busy_s{};
};
std::vector<HostRollup> roll_up_hosts(const std::vector<RankRow>& rows);  // hosts in order of first rank

struct Suspect {
  std::string host{};
  std::vector<int> ranks{};             // its decisive ranks
  std::vector<std::string> evidence{};  // one line per decisive fact
};
// The hosts whose ranks own the decisive findings: a rank lost (no verdict came), a rank others
// name as absent that itself waited on nobody, a rank's own fail finding that is not about a peer.
// A rank that only observed a peer's failure (a collective timeout naming another rank) never
// makes its host a suspect.
std::vector<Suspect> suspect_hosts(const std::vector<RankRow>& rows);

// The odd node out: a host every one of whose ranks spends, per step, more than (1 + margin) x
// the median of the other hosts' ranks outside collectives (busy time: in synchronous training a
// slow node's peers wait inside collectives, so their step times match its own). Needs two hosts
// or more, every rank with kOddNodeMinSteps timed steps, and at most half the hosts odd.
inline constexpr double kOddNodeMargin = 0.5;
inline constexpr int64_t kOddNodeMinSteps = 5;
struct OddNode {
  std::string host;
  double host_busy_s = 0;    // the median of its ranks' median busy times
  double others_busy_s = 0;  // the median of the other ranks'
  std::vector<int> ranks{};
};
std::vector<OddNode> odd_nodes(const std::vector<RankRow>& rows, double margin = kOddNodeMargin);
// The warn finding (odd_node_slow, component host) for one odd node, attributed to its first rank.
Finding odd_node_finding(const OddNode& odd, int64_t step);

// Who wrote a job report and from what: rank 0 with every row through the store, or a survivor
// when rank 0's row never came (its view may be partial).
struct JobView {
  int written_by = 0;
  std::string basis = "rank 0 gathered every rank's row through the job's store";
  std::vector<std::string> cut_links{};  // the writer's interfaces, when every one has lost its link
  std::string unresolved{};              // why this view names no node ("" when it can)
  // The longest time the writer's own process did not run (stopped, a frozen VM, a starved host),
  // when it was long enough for its peers to give up on it (the collective timeout or more).
  std::optional<double> paused_s{};
};
// The suspects as this view can name them: none where it is unresolved; the writer's own host
// alone where its links are cut, or its own process was paused, and ranks of other hosts went
// unheard (a partition seen from the cut side; peers that went on without a frozen writer); else
// suspect_hosts.
std::vector<Suspect> suspects_in_view(const std::vector<RankRow>& rows, const JobView& view);

struct JobSummary {
  std::string verdict;  // the worst of the rows' and the job's own findings'; "CRASHED" for a lost rank
  int exit_code = 0;
};
JobSummary job_summary(const std::vector<RankRow>& rows, const std::vector<Finding>& job_findings);

// job_report.json's document, its HTML view and its JUnit (a testcase per rank, one per host).
nlohmann::json job_report_json(const std::vector<RankRow>& rows, const std::vector<Finding>& job_findings,
                               const JobView& view = {});
std::string job_report_html(const nlohmann::json& job_report);
std::string job_junit_xml(const nlohmann::json& job_report);

}  // namespace rcl
