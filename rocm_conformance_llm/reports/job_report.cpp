#include "rocm_conformance_llm/reports/job_report.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif
#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/files.hpp"
#include "rocm_conformance_llm/checks/findings/robust_stats.hpp"
#include "rocm_conformance_llm/reports/ocp_output.hpp"
#include "rocm_conformance_llm/reports/report.hpp"
#include "rocm_conformance_llm/transport/communicator.hpp"
#include "rocm_conformance_llm/transport/network_preflight.hpp"

namespace rcl {
namespace {

using json = nlohmann::json;

// Signatures by which a rank reports a peer's failure, not its own: they name the peer.
bool about_a_peer(const std::string& signature) {
  static const std::set<std::string> kObserved = {"collective_timeout", "collective_error", "exchange_timeout",
                                                  "rendezvous_failed"};
  return kObserved.count(signature) > 0;
}

// Verdicts from best to worst; a lost rank counts as crashed.
int verdict_order(const std::string& v) {
  static const std::vector<std::string> kOrder = {"PASS", "WARN", "FAIL", "INTERRUPTED", "HUNG", "CRASHED", "LOST"};
  const auto it = std::find(kOrder.begin(), kOrder.end(), v);
  return it == kOrder.end() ? 0 : static_cast<int>(it - kOrder.begin());
}

int job_exit_code(const std::string& verdict) {
  if (verdict == "PASS" || verdict == "WARN") return kExitClean;
  if (verdict == "FAIL") return kExitFailFinding;
  if (verdict == "INTERRUPTED") return kExitInterrupted;
  return kExitCrashOrHang;
}

template <typename T>
json json_or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
template <typename T>
std::optional<T> optional_at(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<T>();
}

std::optional<double> median_or_none(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  return stats::median(std::move(values));
}

const RankRow* row_of_rank(const std::vector<RankRow>& rows, int rank) {
  for (const auto& r : rows)
    if (r.id.world_rank == rank) return &r;
  return nullptr;
}

bool is_lost_row(const RankRow& row) { return row.source == "heartbeat" || row.source == "none"; }

}  // namespace

json to_json(const RankIdentity& id) {
  return {{"world_rank", id.world_rank},
          {"local_rank", id.local_rank},
          {"host", id.host},
          {"device", id.device},
          {"pci_bus_id", id.pci_bus_id}};
}

std::string describe(const RankIdentity& id) {
  std::string device = id.device;
  if (!id.pci_bus_id.empty()) device += " " + id.pci_bus_id;
  return fmt::format("rank {} (host {}, local rank {}, {})", id.world_rank, id.host.empty() ? "?" : id.host,
                     id.local_rank, device.empty() ? "device ?" : device);
}

json to_json(const RankRow& row) {
  json findings = json::array();
  for (const auto& f : row.findings)
    findings.push_back({{"rank", f.rank},
                        {"signature", f.signature},
                        {"severity", to_string(f.severity)},
                        {"message", f.message},
                        {"missing_world_ranks", f.blames}});
  json j = to_json(row.id);
  j.update({{"source", row.source},
            {"verdict", row.verdict},
            {"exit_code", row.exit_code},
            {"findings_by_severity", {{"info", row.info}, {"warn", row.warn}, {"fail", row.fail}}},
            {"steps", row.steps},
            {"median_step_s", json_or_null(row.median_step_s)},
            {"median_busy_s", json_or_null(row.median_busy_s)},
            {"tokens_per_s", json_or_null(row.tokens_per_s)},
            {"peak_memory_bytes", json_or_null(row.peak_memory_bytes)},
            {"last_step", row.last_step},
            {"last_phase", row.last_phase},
            {"findings", findings}});
  return j;
}

RankRow rank_row_from_json(const json& j) {
  RankRow row;
  row.id = {j.at("world_rank").get<int>(), j.value("local_rank", 0), j.value("host", ""), j.value("device", ""),
            j.value("pci_bus_id", "")};
  row.source = j.value("source", "report");
  row.verdict = j.value("verdict", "");
  row.exit_code = j.value("exit_code", -1);
  if (j.contains("findings_by_severity")) {
    const auto& s = j.at("findings_by_severity");
    row.info = s.value("info", 0);
    row.warn = s.value("warn", 0);
    row.fail = s.value("fail", 0);
  }
  row.steps = j.value("steps", int64_t{0});
  row.median_step_s = optional_at<double>(j, "median_step_s");
  row.median_busy_s = optional_at<double>(j, "median_busy_s");
  row.tokens_per_s = optional_at<double>(j, "tokens_per_s");
  row.peak_memory_bytes = optional_at<int64_t>(j, "peak_memory_bytes");
  row.last_step = j.value("last_step", int64_t{0});
  row.last_phase = j.value("last_phase", "");
  for (const auto& f : j.value("findings", json::array()))
    row.findings.push_back({f.at("rank").get<int>(), f.at("signature").get<std::string>(),
                            severity_from_string(f.at("severity").get<std::string>()), f.value("message", ""),
                            f.value("missing_world_ranks", std::vector<int>{})});
  return row;
}

RankRow rank_row(const RankIdentity& id, const std::vector<StepPoint>& steps, int64_t warmup_steps,
                 const std::vector<Finding>& findings, const std::string& phase) {
  RankRow row;
  row.id = id;
  row.last_phase = phase;
  if (!steps.empty()) row.last_step = steps.back().step;
  const bool steady = !steps.empty() && steps.back().step > warmup_steps;
  std::vector<double> step_s, busy_s, rates;
  for (const auto& p : steps) {
    if (steady && p.step <= warmup_steps) continue;
    step_s.push_back(p.step_time_s);
    busy_s.push_back(std::max(0.0, p.step_time_s - p.collective_s));
    if (p.step_time_s > 0) rates.push_back(static_cast<double>(p.tokens) / p.step_time_s);
    if (p.peak_memory_bytes >= 0)
      row.peak_memory_bytes = std::max(row.peak_memory_bytes.value_or(0), p.peak_memory_bytes);
  }
  row.steps = static_cast<int64_t>(step_s.size());
  row.median_step_s = median_or_none(step_s);
  row.median_busy_s = median_or_none(busy_s);
  row.tokens_per_s = median_or_none(rates);
  for (const auto& f : findings) {
    if (f.severity == Severity::info) {
      ++row.info;
      continue;
    }
    ++(f.severity == Severity::fail ? row.fail : row.warn);
    row.findings.push_back(
        {f.rank, f.signature, f.severity, f.message, f.evidence.value("missing_world_ranks", std::vector<int>{})});
  }
  return row;
}

std::vector<HostRollup> roll_up_hosts(const std::vector<RankRow>& rows) {
  std::vector<HostRollup> hosts;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> times;
  for (const auto& row : rows) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.host == row.id.host; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), HostRollup{.host = row.id.host, .verdict = "PASS"});
    it->ranks.push_back(row.id.world_rank);
    const std::string verdict = is_lost_row(row) ? "LOST" : row.verdict;
    if (verdict_order(verdict) > verdict_order(it->verdict)) it->verdict = verdict;
    it->info += row.info;
    it->warn += row.warn;
    it->fail += row.fail;
    it->lost += is_lost_row(row) ? 1 : 0;
    if (row.median_step_s) times[row.id.host].first.push_back(*row.median_step_s);
    if (row.median_busy_s) times[row.id.host].second.push_back(*row.median_busy_s);
  }
  for (auto& h : hosts) {
    h.median_step_s = median_or_none(times[h.host].first);
    h.median_busy_s = median_or_none(times[h.host].second);
  }
  return hosts;
}

std::vector<Suspect> suspect_hosts(const std::vector<RankRow>& rows) {
  // rank -> why it is decisive
  std::map<int, std::vector<std::string>> decisive;
  for (const auto& row : rows) {
    if (row.source == "none")
      decisive[row.id.world_rank].push_back(
          fmt::format("{} sent no verdict and no heartbeat reached this view{}", describe(row.id),
                      row.last_phase.empty() ? std::string() : fmt::format(": {}", row.last_phase)));
    else if (is_lost_row(row))
      decisive[row.id.world_rank].push_back(
          fmt::format("{} sent no verdict; its last heartbeat: step {}{}", describe(row.id), row.last_step,
                      row.last_phase.empty() ? std::string() : fmt::format(", {}", row.last_phase)));
  }
  // Whether a rank itself waited on a peer: then it only observed.
  const auto waited_on_a_peer = [](const RankRow& row) {
    return std::any_of(row.findings.begin(), row.findings.end(), [&](const RowFinding& f) {
      return about_a_peer(f.signature) &&
             std::any_of(f.blames.begin(), f.blames.end(), [&](int b) { return b != row.id.world_rank; });
    });
  };
  for (const auto& row : rows) {
    for (const auto& f : row.findings) {
      if (about_a_peer(f.signature)) {
        for (const int b : f.blames) {
          const RankRow* named = row_of_rank(rows, b);
          if (b == row.id.world_rank || !named) continue;
          if (is_lost_row(*named) || !waited_on_a_peer(*named))
            decisive[b].push_back(fmt::format("named as absent by {}: {}", describe(row.id), f.signature));
        }
      } else if (f.severity == Severity::fail) {
        const RankRow* owner = row_of_rank(rows, f.rank);
        decisive[f.rank].push_back(fmt::format(
            "{} {}: {}", owner ? describe(owner->id) : fmt::format("rank {}", f.rank), f.signature, f.message));
      }
    }
  }
  std::vector<Suspect> suspects;
  for (auto& [rank, evidence] : decisive) {
    const RankRow* row = row_of_rank(rows, rank);
    const std::string host = row ? row->id.host : "?";
    auto it = std::find_if(suspects.begin(), suspects.end(), [&](const auto& s) { return s.host == host; });
    if (it == suspects.end()) it = suspects.insert(suspects.end(), Suspect{.host = host});
    it->ranks.push_back(rank);
    it->evidence.insert(it->evidence.end(), evidence.begin(), evidence.end());
  }
  return suspects;
}

std::vector<Suspect> suspects_in_view(const std::vector<RankRow>& rows, const JobView& view) {
  if (!view.unresolved.empty()) return {};
  const RankRow* writer = row_of_rank(rows, view.written_by);
  const bool unheard_elsewhere = writer && std::any_of(rows.begin(), rows.end(), [&](const RankRow& r) {
                                   return r.source != "report" && r.id.host != writer->id.host;
                                 });
  if (view.cut_links.empty() || !unheard_elsewhere) return suspect_hosts(rows);
  return {Suspect{.host = writer->id.host,
                  .ranks = {view.written_by},
                  .evidence = {fmt::format("every network interface of host {} has lost its link ({}): the ranks "
                                           "of other hosts it did not hear from are behind its own cut",
                                           writer->id.host, fmt::join(view.cut_links, ", "))}}};
}

std::vector<OddNode> odd_nodes(const std::vector<RankRow>& rows, double margin) {
  std::map<std::string, std::vector<const RankRow*>> by_host;
  for (const auto& row : rows) {
    if (is_lost_row(row) || !row.median_busy_s || row.steps < kOddNodeMinSteps)
      return {};  // every rank measured, or none judged
    by_host[row.id.host].push_back(&row);
  }
  if (by_host.size() < 2) return {};
  std::vector<OddNode> odd;
  for (const auto& [host, members] : by_host) {
    std::vector<double> others, mine;
    for (const auto& row : rows)
      if (row.id.host != host) others.push_back(*row.median_busy_s);
    double fastest = std::numeric_limits<double>::infinity();
    OddNode node{.host = host};
    for (const RankRow* r : members) {
      mine.push_back(*r->median_busy_s);
      fastest = std::min(fastest, *r->median_busy_s);
      node.ranks.push_back(r->id.world_rank);
    }
    node.host_busy_s = stats::median(mine);
    node.others_busy_s = stats::median(others);
    if (fastest > (1.0 + margin) * node.others_busy_s) odd.push_back(std::move(node));
  }
  // The odd one out is a minority: more than half the hosts slower is no odd node.
  if (2 * odd.size() > by_host.size()) return {};
  return odd;
}

Finding odd_node_finding(const OddNode& odd, int64_t step) {
  const double ratio = odd.others_busy_s > 0 ? odd.host_busy_s / odd.others_busy_s : 0.0;
  Finding finding{
      component::host,
      "odd_node_slow",
      Severity::warn,
      step,
      odd.ranks.front(),
      fmt::format("host {} is the odd node out: its ranks {} spend {:.3f} s a step outside collectives (median), "
                  "{:.1f}x the other hosts' {:.3f} s (margin {:.0f}%)",
                  odd.host, fmt::join(odd.ranks, ","), odd.host_busy_s, ratio, odd.others_busy_s, 100 * kOddNodeMargin),
      {{"host", odd.host},
       {"world_ranks", odd.ranks},
       {"host_busy_s", odd.host_busy_s},
       {"others_busy_s", odd.others_busy_s},
       {"ratio", ratio},
       {"margin", kOddNodeMargin}}};
  finding.action = Action::isolate_node;  // a node to drain, not a library to report
  return finding;
}

JobSummary job_summary(const std::vector<RankRow>& rows, const std::vector<Finding>& job_findings) {
  std::string verdict = "PASS";
  for (const auto& row : rows) {
    const std::string v = is_lost_row(row) ? "CRASHED" : row.verdict;
    if (verdict_order(v) > verdict_order(verdict)) verdict = v;
  }
  for (const auto& f : job_findings) {
    const std::string v = f.severity == Severity::fail ? "FAIL" : f.severity == Severity::warn ? "WARN" : "PASS";
    if (verdict_order(v) > verdict_order(verdict)) verdict = v;
  }
  return {verdict, job_exit_code(verdict)};
}

json job_report_json(const std::vector<RankRow>& rows, const std::vector<Finding>& job_findings,
                     const JobView& view) {
  const JobSummary summary = job_summary(rows, job_findings);
  json doc = {{"tool", "rocm-conformance-llm"},
              {"verdict", summary.verdict},
              {"exit_code", summary.exit_code},
              {"world_size", rows.size()},
              {"written_by", view.written_by},
              {"basis", view.basis},
              {"cut_links", view.cut_links},
              {"unresolved", view.unresolved.empty() ? json(nullptr) : json(view.unresolved)},
              {"ranks", json::array()},
              {"hosts", json::array()},
              {"suspect_hosts", json::array()},
              {"odd_node_margin", kOddNodeMargin},
              {"findings", json::array()}};
  for (const auto& row : rows) doc["ranks"].push_back(to_json(row));
  for (const auto& h : roll_up_hosts(rows))
    doc["hosts"].push_back({{"host", h.host},
                            {"world_ranks", h.ranks},
                            {"verdict", h.verdict},
                            {"findings_by_severity", {{"info", h.info}, {"warn", h.warn}, {"fail", h.fail}}},
                            {"lost_ranks", h.lost},
                            {"median_step_s", json_or_null(h.median_step_s)},
                            {"median_busy_s", json_or_null(h.median_busy_s)}});
  for (const auto& s : suspects_in_view(rows, view))
    doc["suspect_hosts"].push_back({{"host", s.host}, {"world_ranks", s.ranks}, {"evidence", s.evidence}});
  for (const auto& f : job_findings) doc["findings"].push_back(to_json(f, action_of(f, nullptr)));
  return doc;
}

std::string job_report_html(const json& doc) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rocm-conformance-llm job report</title></head>"
      "<body>\n<h1>Job verdict: {} (exit {})</h1>\n",
      xml_escape(doc.at("verdict").get<std::string>()), doc.at("exit_code").get<int>());
  html += "<h2>Suspect nodes</h2>\n<ul id=\"suspects\">\n";
  for (const auto& s : doc.at("suspect_hosts"))
    for (const auto& e : s.at("evidence"))
      html += fmt::format("<li><b>{}</b>: {}</li>\n", xml_escape(s.at("host").get<std::string>()),
                          xml_escape(e.get<std::string>()));
  for (const auto& f : doc.at("findings"))
    html += fmt::format("<li>{}: {}</li>\n", xml_escape(f.at("signature").get<std::string>()),
                        xml_escape(f.at("message").get<std::string>()));
  html +=
      "</ul>\n<h2>Hosts</h2>\n<table id=\"hosts\"><tr><th>host</th><th>ranks</th><th>verdict</th><th>lost</th></tr>\n";
  for (const auto& h : doc.at("hosts"))
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        xml_escape(h.at("host").get<std::string>()), h.at("world_ranks").dump(),
                        h.at("verdict").get<std::string>(), h.at("lost_ranks").get<int>());
  html +=
      "</table>\n<h2>Ranks</h2>\n<table id=\"ranks\"><tr><th>rank</th><th>host</th><th>local rank</th><th>device</th>"
      "<th>source</th><th>verdict</th><th>fail / warn</th><th>median step s</th><th>tokens/s</th><th>last step</th>"
      "<th>last phase</th></tr>\n";
  for (const auto& r : doc.at("ranks"))
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>\n",
        r.at("world_rank").get<int>(), xml_escape(r.at("host").get<std::string>()), r.at("local_rank").get<int>(),
        xml_escape(r.at("device").get<std::string>()), r.at("source").get<std::string>(),
        xml_escape(r.at("verdict").get<std::string>()), r.at("findings_by_severity").at("fail").get<int>(),
        r.at("findings_by_severity").at("warn").get<int>(), r.at("median_step_s").dump(), r.at("tokens_per_s").dump(),
        r.at("last_step").get<int64_t>(), xml_escape(r.at("last_phase").get<std::string>()));
  html += "</table>\n</body></html>\n";
  return html;
}

std::string job_junit_xml(const json& doc) {
  std::string cases;
  int failures = 0, total = 0;
  const auto add_case = [&](const std::string& classname, const std::string& name, const std::string& failure,
                            const std::string& out) {
    ++total;
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\">\n", classname, xml_escape(name));
    if (!failure.empty()) {
      ++failures;
      cases += fmt::format("      <failure message=\"{}\"/>\n", xml_escape(failure));
    }
    if (!out.empty()) cases += fmt::format("      <system-out>{}</system-out>\n", xml_escape(out));
    cases += "    </testcase>\n";
  };
  for (const auto& r : doc.at("ranks")) {
    const std::string verdict = r.at("verdict").get<std::string>();
    const std::string name =
        fmt::format("rank {} ({}, local rank {}, {})", r.at("world_rank").get<int>(), r.at("host").get<std::string>(),
                    r.at("local_rank").get<int>(), r.at("device").get<std::string>());
    std::string out;
    for (const auto& f : r.at("findings"))
      out += f.at("signature").get<std::string>() + ": " + f.at("message").get<std::string>() + "\n";
    const bool bad = r.at("source") != "report" || (verdict != "PASS" && verdict != "WARN");
    add_case("rocm-conformance-llm.rank", name,
             bad ? fmt::format("{} (source: {})", verdict, r.at("source").get<std::string>()) : "", out);
  }
  for (const auto& h : doc.at("hosts")) {
    const std::string host = h.at("host").get<std::string>();
    std::string failure, out;
    for (const auto& s : doc.at("suspect_hosts"))
      if (s.at("host") == host) failure = fmt::format("suspect node: {}", s.at("evidence").dump());
    for (const auto& f : doc.at("findings"))
      if (f.at("evidence").value("host", "") == host) out += f.at("message").get<std::string>() + "\n";
    add_case("rocm-conformance-llm.host", host, failure, out);
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"rocm-conformance-llm.job\" "
      "tests=\"{}\" failures=\"{}\">\n{}  </testsuite>\n</testsuites>\n",
      total, failures, cases);
}

namespace {
constexpr std::chrono::seconds kBeatInterval{1};
constexpr std::chrono::milliseconds kPutLimit{2000};
constexpr std::chrono::milliseconds kRosterWait{100};
constexpr std::chrono::milliseconds kStoreProbeWait{3000};

std::optional<RankRow> parsed_row(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return rank_row_from_json(j);
}
}  // namespace

JobRecords::JobRecords(Communicator& world, RankIdentity id, int64_t warmup_steps, StoreAddress store)
    : world_(world), id_(std::move(id)), warmup_steps_(warmup_steps), store_(std::move(store)) {
  world_.put_record("beat", to_json(rank_row(id_, {}, warmup_steps_, {}, "setup")).dump(), std::chrono::seconds(1));
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
  const auto now = std::chrono::steady_clock::now();
  if (now - last_beat_ < kBeatInterval) return;
  last_beat_ = now;
  RankRow beat = rank_row(id_, steps_.steps(), warmup_steps_, {}, fmt::format("after step {}", r.step));
  beat.source = "heartbeat";
  world_.put_record("beat", to_json(beat).dump(), kPutLimit);
  // Who every rank is, while the store answers: a survivor's view needs it if the store goes.
  if (roster_.empty() || std::any_of(roster_.begin(), roster_.end(), [](const auto& id) { return !id; }))
    learn_roster(kRosterWait);
}

std::vector<RankRow> JobRecords::gather(const RankRow& mine, std::chrono::milliseconds limit) const {
  // The writer's own row too: collect_records returns early once every rank's row is in.
  const auto rows_in = world_.collect_records("row", limit);
  // The lost ranks' last heartbeats: a short wait, they are already there or never will be.
  const auto beats = world_.collect_records("beat", std::chrono::milliseconds(500));
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
    RankRow row = parsed_row(beats[r]).value_or(RankRow{.id = {.world_rank = r}, .source = "none"});
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

void JobRecords::finish(const std::filesystem::path& output_dir, const std::string& verdict, int exit_code,
                        const std::vector<Finding>& findings, const std::string& phase,
                        std::chrono::milliseconds limit) {
  RankRow mine = rank_row(id_, steps_.steps(), warmup_steps_, findings, phase);
  mine.verdict = verdict;
  mine.exit_code = exit_code;
  const bool stored = world_.put_record("row", to_json(mine).dump(), kPutLimit);
  if (!stored) spdlog::warn("rank {}: the job report's store did not take this rank's row", id_.world_rank);
  JobView view{.written_by = id_.world_rank, .cut_links = cut_links(list_interfaces())};
  if (id_.world_rank == 0) {
    write_job_report(output_dir, gather(mine, limit), view, mine.last_step);
    return;
  }
  // Rank 0 writes the job report; a survivor only when rank 0 may be lost.
  if (stored) {
    if (!rank0_may_be_lost(mine) || world_.collect_records("row", limit, {0})[0]) return;
    // The store answers: the lowest rank whose row is in gathers every row, as rank 0 would.
    const auto rows_in = world_.collect_records("row", kPutLimit);
    for (int r = 1; r < id_.world_rank; ++r)
      if (rows_in[r]) return;
    view.basis = "rank 0's row never came: the lowest surviving rank gathered every row through the job's store";
    write_job_report(output_dir, gather(mine, kPutLimit), view, mine.last_step);
    return;
  }
  const auto rows = rows_without_store(mine, view);
  write_job_report(output_dir, rows, view, mine.last_step);
}

void JobRecords::write_job_report(const std::filesystem::path& output_dir, const std::vector<RankRow>& rows,
                                  const JobView& view, int64_t step) const {
  std::vector<Finding> job_findings;
  for (const auto& odd : odd_nodes(rows)) job_findings.push_back(odd_node_finding(odd, step));
  const json doc = job_report_json(rows, job_findings, view);
  try {
    write_file_atomically(output_dir / "job_report.json", doc.dump(2) + "\n");
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
  if (!view.unresolved.empty()) spdlog::error("job report: no node named: {}", view.unresolved);
  for (const auto& f : job_findings) spdlog::warn("job report: {}", f.message);
  spdlog::info("job report ({} ranks, written by rank {}): {} (exit {}) in {}", rows.size(), view.written_by,
               doc.at("verdict").get<std::string>(), doc.at("exit_code").get<int>(),
               (output_dir / "job_report.json").string());
}

}  // namespace rcl
