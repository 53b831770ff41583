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

bool about_a_peer(const std::string& signature) {
  static const std::set<std::string> kObserved = {"collective_timeout", "collective_error", "exchange_timeout",
                                                  "rendezvous_failed"};
  return kObserved.count(signature) > 0;
}

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
  // A lost rank explains what its peers saw: a killed rank resets its peers' links at once, a
  // launcher stops its node-mates (torchrun's agent), and ranks that left so are then found
  // absent by those still waiting. So where a rank is lost, a peer's account of absence decides
  // only about a rank that gave no account of its own (a survivor's view without the store).
  const bool some_rank_lost = std::any_of(rows.begin(), rows.end(), is_lost_row);
  for (const auto& row : rows) {
    for (const auto& f : row.findings) {
      if (about_a_peer(f.signature)) {
        for (const int b : f.blames) {
          const RankRow* named = row_of_rank(rows, b);
          if (b == row.id.world_rank || !named || (some_rank_lost && named->source == "report")) continue;
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
  // A writer that was paused caused what it saw; a cut writer, what it did not hear.
  if (!writer || (!view.paused_s && (view.cut_links.empty() || !unheard_elsewhere))) return suspect_hosts(rows);
  const std::string why =
      !view.paused_s
          ? fmt::format("every network interface of host {} has lost its link ({}): the ranks of other hosts it did "
                        "not hear from are behind its own cut",
                        writer->id.host, fmt::join(view.cut_links, ", "))
          : fmt::format("{}'s own process did not run for {:.0f} s (stopped, a frozen VM or a starved host), longer "
                        "than the collective timeout: its peers gave up waiting for it",
                        describe(writer->id), *view.paused_s);
  return {Suspect{.host = writer->id.host, .ranks = {view.written_by}, .evidence = {why}}};
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
              {"paused_s", json_or_null(view.paused_s)},
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

}  // namespace rcl
