#include "rocm_conformance_llm/reports/job_records.hpp"

#include <algorithm>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/reports/ocp_output.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/network_preflight.hpp"
#include "rocm_conformance_llm/utils/logging.hpp"

namespace rcl {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kBeatInterval{1};
constexpr std::chrono::seconds kPulseInterval{1};
constexpr std::chrono::milliseconds kPutLimit{2000};
constexpr std::chrono::milliseconds kReadLimit{500};
constexpr std::chrono::milliseconds kPoll{250};
constexpr std::chrono::milliseconds kRosterWait{100};
constexpr std::chrono::milliseconds kStoreProbeWait{3000};
// How long the writer stays for the ranks that reported to read the outcome (it may serve the store).
constexpr std::chrono::seconds kReadByAllLimit{5};

std::optional<RankRow> parsed_row(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return rank_row_from_json(j);
}

std::vector<int> ranks_without(const std::vector<std::optional<std::string>>& records, int except) {
  std::vector<int> missing;
  for (int r = 0; r < static_cast<int>(records.size()); ++r)
    if (r != except && !records[r]) missing.push_back(r);
  return missing;
}

// Whose pulse has stood still for kPulseStale, by this rank's own clock (no clock is shared
// across hosts): a rank is taken to have moved when this watch starts.
class PulseWatch {
 public:
  explicit PulseWatch(int world) : seen_(world), moved_(world, Clock::now()) {}
  void read(const Communicator& world, const std::vector<int>& ranks) {
    const auto pulses = world.collect_records("pulse", kReadLimit, ranks);
    const auto now = Clock::now();
    for (const int r : ranks)
      if (pulses[r] && pulses[r] != seen_[r]) {
        seen_[r] = pulses[r];
        moved_[r] = now;
      }
  }
  bool stale(int rank) const { return Clock::now() - moved_[rank] >= kPulseStale; }

 private:
  std::vector<std::optional<std::string>> seen_;
  std::vector<Clock::time_point> moved_;
};

}  // namespace

json to_json(const JobOutcome& o) {
  json suspects = json::array();
  for (const auto& s : o.suspects) suspects.push_back({{"host", s.host}, {"world_ranks", s.ranks}});
  return {{"verdict", o.verdict}, {"exit_code", o.exit_code}, {"suspects", suspects}, {"unresolved", o.unresolved},
          {"written_by", o.written_by}, {"host", o.host}, {"path", o.path}};
}

JobOutcome job_outcome_from_json(const json& j) {
  JobOutcome o{.verdict = j.at("verdict").get<std::string>(),
               .exit_code = j.at("exit_code").get<int>(),
               .unresolved = j.value("unresolved", ""),
               .written_by = j.value("written_by", 0),
               .host = j.value("host", ""),
               .path = j.value("path", "")};
  for (const auto& s : j.value("suspects", json::array()))
    o.suspects.push_back({.host = s.at("host").get<std::string>(), .ranks = s.at("world_ranks").get<std::vector<int>>()});
  return o;
}

std::string job_outcome_line(const JobOutcome& o) {
  std::string named;
  for (const auto& s : o.suspects)
    named += fmt::format("{}{} (world ranks {})", named.empty() ? "" : ", ", s.host, fmt::join(s.ranks, ","));
  const std::string drain = !named.empty()          ? "drain " + named
                            : !o.unresolved.empty() ? "no node named: " + o.unresolved
                                                    : "no node to drain";
  return fmt::format("job verdict {} (exit {}): {}; job report: {} on {}, written by rank {}", o.verdict, o.exit_code,
                     drain, o.path, o.host, o.written_by);
}

JobRecords::JobRecords(Communicator& world, RankIdentity id, int64_t warmup_steps, StoreAddress store)
    : world_(world), id_(std::move(id)), warmup_steps_(warmup_steps), store_(std::move(store)) {
  world_.put_record("beat", to_json(rank_row(id_, {}, warmup_steps_, {}, "setup")).dump(), std::chrono::seconds(1));
  pulse_thread_ = std::thread([this] { pulse(); });
}

JobRecords::~JobRecords() {
  {
    std::lock_guard<std::mutex> lock(pulse_mutex_);
    pulse_stop_ = true;
  }
  pulse_wake_.notify_all();
  pulse_thread_.join();
}

void JobRecords::pulse() {
  std::unique_lock<std::mutex> lock(pulse_mutex_);
  for (int64_t count = 1;; ++count) {
    // Fire and forget: a store that stops answering must not stall the pulse, nor its clock.
    world_.put_record("pulse", std::to_string(count), std::chrono::milliseconds(0));
    const auto slept_from = Clock::now();
    if (pulse_wake_.wait_for(lock, kPulseInterval, [this] { return pulse_stop_; })) return;
    // A sleep of 1 s that took much longer: the whole process did not run (SIGSTOP, a paused VM).
    const double late_s = std::chrono::duration<double>(Clock::now() - slept_from - kPulseInterval).count();
    if (late_s > longest_pause_s_.load()) longest_pause_s_ = late_s;
  }
}

std::optional<double> JobRecords::paused_s() const {
  const double paused = longest_pause_s_.load();
  // Long enough that its peers' collectives timed out on it.
  return paused >= std::chrono::duration<double>(world_.timeout()).count() ? std::optional(paused) : std::nullopt;
}

void JobRecords::learn_roster(std::chrono::milliseconds limit) {
  const auto beats = world_.collect_records("beat", limit);
  roster_.resize(beats.size());
  for (size_t r = 0; r < beats.size(); ++r)
    if (!roster_[r])
      if (auto row = parsed_row(beats[r])) roster_[r] = row->id;
}

void JobRecords::on_step(const StepRecord& r) {
  steps_.on_step(r);
  const auto now = Clock::now();
  if (now - last_beat_ < kBeatInterval) return;
  last_beat_ = now;
  RankRow beat = rank_row(id_, steps_.steps(), warmup_steps_, {}, fmt::format("after step {}", r.step));
  beat.source = "heartbeat";
  world_.put_record("beat", to_json(beat).dump(), kPutLimit);
  // Who every rank is, while the store answers: a survivor's view needs it if the store goes.
  if (roster_.empty() || std::any_of(roster_.begin(), roster_.end(), [](const auto& id) { return !id; }))
    learn_roster(kRosterWait);
}

Clock::time_point JobRecords::cut_by_stop(Clock::time_point deadline) const {
  if (!stop_seen_ && stopped_ && stopped_()) stop_seen_ = Clock::now();
  return stop_seen_ ? std::min(deadline, *stop_seen_ + kAfterStop) : deadline;
}

std::vector<RankRow> JobRecords::gather(const RankRow& mine, Clock::time_point deadline) const {
  std::vector<std::optional<std::string>> rows_in(world_.world_size());
  PulseWatch pulses(world_.world_size());
  for (;;) {
    auto missing = ranks_without(rows_in, id_.world_rank);
    if (!missing.empty()) {
      auto got = world_.collect_records("row", kReadLimit, missing);
      for (const int r : missing) rows_in[r] = std::move(got[r]);
      missing = ranks_without(rows_in, id_.world_rank);
    }
    if (missing.empty()) break;
    pulses.read(world_, missing);
    const bool all_stale = std::all_of(missing.begin(), missing.end(), [&](int r) { return pulses.stale(r); });
    if (all_stale || Clock::now() >= cut_by_stop(deadline)) break;
    std::this_thread::sleep_for(kPoll);
  }
  // The lost ranks' last heartbeats: they are already there or never will be.
  const auto beats = world_.collect_records("beat", kReadLimit);
  const auto comm_beats = world_.read_heartbeats();
  std::vector<RankRow> rows;
  for (int r = 0; r < static_cast<int>(rows_in.size()); ++r) {
    if (r == id_.world_rank) {
      rows.push_back(mine);
      continue;
    }
    if (auto row = parsed_row(rows_in[r])) {
      rows.push_back(std::move(*row));
      continue;
    }
    const bool known = r < static_cast<int>(roster_.size()) && roster_[r];
    RankRow row = parsed_row(beats[r]).value_or(
        RankRow{.id = known ? *roster_[r] : RankIdentity{.world_rank = r}, .source = "none"});
    row.id.world_rank = r;
    row.verdict = "LOST";
    row.exit_code = -1;
    row.findings.clear();
    if (row.source == "report") row.source = "heartbeat";
    // The collective it was last entering, where the store's collective heartbeat is newer.
    if (comm_beats && (*comm_beats)[r].seen && (*comm_beats)[r].step >= row.last_step) {
      const RankHeartbeat& b = (*comm_beats)[r];
      row.last_step = b.step;
      row.last_phase = fmt::format("entering collective #{} '{}'", b.sequence, b.op);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Whether this survivor's own findings point at rank 0's host: a peer failure naming one of its
// ranks absent, or one that names nobody (every rank entered the collective that failed).
bool JobRecords::rank0_may_be_lost(const RankRow& mine) const {
  const std::string rank0_host = !roster_.empty() && roster_[0] ? roster_[0]->host : std::string();
  return std::any_of(mine.findings.begin(), mine.findings.end(), [&](const RowFinding& f) {
    if (!about_a_peer(f.signature)) return false;
    if (f.blames.empty()) return true;
    return std::any_of(f.blames.begin(), f.blames.end(), [&](int b) {
      return b == 0 || (!rank0_host.empty() && b < static_cast<int>(roster_.size()) && roster_[b] &&
                        roster_[b]->host == rank0_host);
    });
  });
}

std::vector<RankRow> JobRecords::rows_without_store(const RankRow& mine, JobView& view) const {
  std::vector<RankRow> rows;
  for (int r = 0; r < world_.world_size(); ++r) {
    if (r == id_.world_rank) {
      rows.push_back(mine);
      continue;
    }
    const bool known = r < static_cast<int>(roster_.size()) && roster_[r];
    rows.push_back(RankRow{.id = known ? *roster_[r] : RankIdentity{.world_rank = r},
                           .source = "unknown",
                           .verdict = "UNKNOWN"});
  }
  const std::string where = fmt::format("{}:{}", store_.host, store_.port);
  view.basis = fmt::format("the job's store at {} stopped answering: rank {}'s view alone", where, id_.world_rank);
  if (!view.cut_links.empty()) return rows;  // this host's own cut explains the silence
  const TcpProbe probe = tcp_probe(store_.host, store_.port, kStoreProbeWait);
  const std::string rank0_host = rows[0].id.host.empty() ? store_.host : rows[0].id.host;
  if (probe == TcpProbe::refused || (probe == TcpProbe::answers && rank0_may_be_lost(mine))) {
    RankRow& rank0 = rows[0];
    rank0.source = "none";
    rank0.verdict = "LOST";
    rank0.last_phase = probe == TcpProbe::refused
                           ? fmt::format("host {} refuses connections to the store at {}: the process serving it "
                                         "(rank 0, or its launcher on that node) is gone",
                                         rank0_host, where)
                           : fmt::format("the store at {} accepts connections but does not serve them, and rank {} "
                                         "found rank 0's host absent: the process serving it is frozen",
                                         where, id_.world_rank);
    return rows;
  }
  view.unresolved = fmt::format(
      "the job's store at {} did not answer from host {}: host {} is down or the path between them is cut, which "
      "one side cannot tell; rank 0's own job report, where it exists, decides",
      where, id_.host, rank0_host);
  return rows;
}

std::optional<JobOutcome> JobRecords::await_outcome(Clock::time_point deadline, int writer, bool& store_gone) const {
  PulseWatch pulses(world_.world_size());
  for (;;) {
    const auto outcomes = world_.collect_records("job", kReadLimit, {writer});
    for (const auto& text : outcomes) {
      if (!text) continue;
      const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) continue;
      world_.put_record("read", "1", kPutLimit);  // the writer may serve the store: it waits for this
      return job_outcome_from_json(j);
    }
    if (!world_.put_record("waiting", "1", kPutLimit)) {
      store_gone = true;
      return std::nullopt;
    }
    pulses.read(world_, {writer});
    if (pulses.stale(writer)) return std::nullopt;
    if (Clock::now() >= cut_by_stop(deadline)) return std::nullopt;
    std::this_thread::sleep_for(kPoll);
  }
}

int JobRecords::stand_in_for_rank0() const {
  // The survivors that reported; rank 0's host first (its output directory is where a user looks).
  const auto rows = world_.collect_records("row", kReadLimit);
  const auto rank0 = parsed_row(world_.collect_records("beat", kReadLimit, {0})[0]);
  const std::string rank0_host = rank0 ? rank0->id.host : std::string();
  std::optional<std::pair<bool, int>> first;  // (not on rank 0's host, rank)
  for (int r = 1; r < static_cast<int>(rows.size()); ++r) {
    const auto row = r == id_.world_rank ? std::optional(RankRow{.id = id_}) : parsed_row(rows[r]);
    if (!row) continue;
    const std::pair<bool, int> key{row->id.host != rank0_host, r};
    if (!first || key < *first) first = key;
  }
  return first ? first->second : id_.world_rank;
}

void JobRecords::finish(const std::filesystem::path& output_dir, const std::string& verdict, int exit_code,
                        const std::vector<Finding>& findings, const std::string& phase) {
  finishing_ = true;
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = false; }
  } done{finishing_};
  RankRow mine = rank_row(id_, steps_.steps(), warmup_steps_, findings, phase);
  mine.verdict = verdict;
  mine.exit_code = exit_code;
  const bool stored = world_.put_record("row", to_json(mine).dump(), kPutLimit);
  if (!stored) spdlog::warn("rank {}: the job report's store did not take this rank's row", id_.world_rank);
  JobView view{.written_by = id_.world_rank, .cut_links = cut_links(list_interfaces()), .paused_s = paused_s()};
  const auto timeout = world_.timeout();
  if (id_.world_rank == 0) {
    write_and_publish(output_dir, gather(mine, Clock::now() + timeout + kGatherMargin), view, mine.last_step);
    return;
  }
  // Rank 0 may still wait inside its last collective (one timeout), then gathers (one more).
  bool store_gone = !stored;
  if (!store_gone)
    if (auto outcome = await_outcome(Clock::now() + 2 * (timeout + kGatherMargin), 0, store_gone)) {
      announce(*outcome);
      return;
    }
  if (store_gone) {
    write_and_publish(output_dir, rows_without_store(mine, view), view, mine.last_step);
    return;
  }
  const int stand_in = stand_in_for_rank0();
  if (stand_in == id_.world_rank) {
    view.basis = fmt::format(
        "rank 0's pulse stopped before its job report came: rank {}, the first survivor on rank 0's host (else the "
        "lowest), gathered every row through the job's store",
        id_.world_rank);
    write_and_publish(output_dir, gather(mine, Clock::now() + timeout + kGatherMargin), view, mine.last_step);
    return;
  }
  if (auto outcome = await_outcome(Clock::now() + timeout + 2 * kGatherMargin, stand_in, store_gone))
    announce(*outcome);
  else
    spdlog::error("rank {}: no job report reached this rank (rank 0's side lost, and no survivor wrote one in time)",
                  id_.world_rank);
}

void JobRecords::wait_for_finish(std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (finishing_.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void JobRecords::write_and_publish(const std::filesystem::path& output_dir, const std::vector<RankRow>& rows,
                                   const JobView& view, int64_t step) {
  std::vector<Finding> job_findings;
  for (const auto& odd : odd_nodes(rows)) job_findings.push_back(odd_node_finding(odd, step));
  const json doc = job_report_json(rows, job_findings, view);
  const auto path = output_dir / "job_report.json";
  try {
    write_file_atomically(path, doc.dump(2) + "\n");
    write_file_atomically(output_dir / "job_junit.xml", job_junit_xml(doc));
    write_file_atomically(
        output_dir / "job_ocp.jsonl",
        ocp_jsonl(job_ocp_artifacts(doc, {this_command_line(), id_.host, started_, std::chrono::system_clock::now()})));
    write_file_atomically(output_dir / "job_report.html", job_report_html(doc));  // the last: a waiter's sign
  } catch (const std::exception& e) {
    spdlog::error("cannot write the job report in {}: {}", output_dir.string(), e.what());
    return;
  }
  for (const auto& s : doc.at("suspect_hosts"))
    spdlog::error("job report: suspect node {} (world ranks {}): {}", s.at("host").get<std::string>(),
                  s.at("world_ranks").dump(), s.at("evidence").at(0).get<std::string>());
  for (const auto& f : job_findings) spdlog::warn("job report: {}", f.message);
  JobOutcome outcome{.verdict = doc.at("verdict").get<std::string>(),
                     .exit_code = doc.at("exit_code").get<int>(),
                     .unresolved = view.unresolved,
                     .written_by = view.written_by,
                     .host = id_.host,
                     .path = std::filesystem::absolute(path).string()};
  for (const auto& s : doc.at("suspect_hosts"))
    outcome.suspects.push_back(
        {.host = s.at("host").get<std::string>(), .ranks = s.at("world_ranks").get<std::vector<int>>()});
  // Stay until the ranks that reported have read it: this process may serve the store.
  if (world_.put_record("job", to_json(outcome).dump(), kPutLimit)) {
    std::vector<int> readers;
    for (const auto& row : rows)
      if (row.source == "report" && row.id.world_rank != id_.world_rank) readers.push_back(row.id.world_rank);
    if (!readers.empty()) {
      const auto until = cut_by_stop(Clock::now() + kReadByAllLimit);
      world_.collect_records("read", std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()),
                             readers);
    }
  }
  announce(outcome);
}

void JobRecords::announce(const JobOutcome& outcome) const {
  // One line per node: the writer's, and its first rank the outcome does not name lost (its first
  // local rank where the roster never came).
  const auto named = [&](int rank) {
    return std::any_of(outcome.suspects.begin(), outcome.suspects.end(), [&](const Suspect& s) {
      return std::find(s.ranks.begin(), s.ranks.end(), rank) != s.ranks.end();
    });
  };
  const auto speaks_for_its_node = [&] {
    if (roster_.empty()) return id_.local_rank == 0;
    for (int r = 0; r < static_cast<int>(roster_.size()); ++r)
      if (roster_[r] && roster_[r]->host == id_.host && !named(r)) return r == id_.world_rank;
    return true;
  };
  if (id_.world_rank != outcome.written_by && !speaks_for_its_node()) return;
  log_unfiltered(outcome.exit_code == 0 ? spdlog::level::info : spdlog::level::err, job_outcome_line(outcome));
}

}  // namespace rcl
