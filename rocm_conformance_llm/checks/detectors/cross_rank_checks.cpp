#include "rocm_conformance_llm/checks/detectors/cross_rank_checks.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#if __has_include(<fmt/ranges.h>)
#include <fmt/ranges.h>  // fmt::join (moved there in fmt 11)
#endif

#include "rocm_conformance_llm/base/strings.hpp"
#include "rocm_conformance_llm/checks/detectors/comm_checks.hpp"
#include "rocm_conformance_llm/transport/split_model.hpp"

namespace rcl {
namespace {

// float32 canary sizes: 4 KiB, 256 KiB and 4 MiB. RCCL switches protocol with message size
// (LL, LL128, Simple); a wrong reduction has been reported for one protocol only (TheRock#7871).
constexpr int64_t kCanaryElements[] = {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 20};

// The lowest rank holding the majority value, given the ranks that do not.
int first_rank_not_in(const std::vector<int>& odd) {
  int rank = 0;
  while (std::find(odd.begin(), odd.end(), rank) != odd.end()) ++rank;
  return rank;
}

}  // namespace

CrossRankChecks::CrossRankChecks(std::shared_ptr<const GradientSync> sync) : sync_(std::move(sync)) {
  if (!sync_ || !sync_->world().communicator)
    throw std::invalid_argument("cross-rank checks need a world of several ranks (a group)");
}

std::vector<std::vector<double>> CrossRankChecks::all_gather_values(const std::vector<double>& values,
                                                                    const std::string& op) {
  const torch::Tensor mine = torch::tensor(values, torch::kDouble);
  const torch::Tensor all = comm().all_gather(mine, op).contiguous();
  std::vector<std::vector<double>> out(world().size);
  for (int r = 0; r < world().size; ++r) {
    const double* row = all[r].data_ptr<double>();
    out[r].assign(row, row + values.size());
  }
  return out;
}

Finding CrossRankChecks::finding(const std::string& signature, Severity severity, std::string message,
                                 nlohmann::json evidence) const {
  evidence["backend"] = comm().backend();
  evidence["world_size"] = world().size;
  return Finding{component::rccl, signature,          severity,           comm().step(),
                 world().rank,    std::move(message), std::move(evidence)};
}

std::vector<Finding> CrossRankChecks::run_canary() {
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(comm().device());
  std::vector<double> wrong_here;
  std::vector<std::optional<CanaryMismatch>> details;
  for (const int64_t numel : kCanaryElements) {
    torch::Tensor t = canary_contribution(world().rank, numel, options);
    if (canary_fault_offset_ != 0.0) t.add_(canary_fault_offset_);
    comm().all_reduce_sum(t, "allreduce_canary");
    details.push_back(compare_canary(t, world().size));
    wrong_here.push_back(details.back() ? static_cast<double>(details.back()->wrong_elements) : 0.0);
  }
  // Every rank learns every rank's verdict: a wrong result on rank 1 alone is not hidden by a
  // rank 0 that only checks its own (legacy-rocm-build#6565).
  const auto wrong = all_gather_values(wrong_here, "canary_verdict");
  std::vector<Finding> findings;
  for (size_t i = 0; i < std::size(kCanaryElements); ++i) {
    std::vector<int> bad_ranks;
    std::vector<int64_t> counts;
    for (int r = 0; r < world().size; ++r) {
      counts.push_back(static_cast<int64_t>(wrong[r][i]));
      if (counts.back() > 0) bad_ranks.push_back(r);
    }
    if (bad_ranks.empty()) continue;
    const int64_t bytes = kCanaryElements[i] * 4;
    std::string message =
        fmt::format("exact all-reduce canary ({} float32) wrong on rank{} {}", binary_size_text(bytes),
                    bad_ranks.size() > 1 ? "s" : "", fmt::join(bad_ranks, ","));
    nlohmann::json evidence = {{"bytes", bytes},
                               {"elements", kCanaryElements[i]},
                               {"wrong_ranks", bad_ranks},
                               {"wrong_elements_per_rank", counts}};
    if (const auto& mine = details[i]) {
      message += fmt::format(": here {} of {} elements wrong, first at [{}] = {} instead of {}", mine->wrong_elements,
                             kCanaryElements[i], mine->first_index, mine->got, mine->expected);
      evidence["first_index"] = mine->first_index;
      evidence["got"] = mine->got;
      evidence["expected"] = mine->expected;
    }
    findings.push_back(finding("allreduce_canary_mismatch", Severity::fail, message, evidence));
  }
  return findings;
}

CollectiveBatteryResult CrossRankChecks::run_collective_battery(const std::vector<BatteryCase>& cases, uint64_t seed,
                                                                const BatteryFaults& faults) {
  const std::vector<BatteryOutcome> mine = run_battery(comm(), cases, seed, faults);
  constexpr size_t kFields = 6;  // wrong elements, first index, got, expected, source rank, seconds
  std::vector<double> packed;
  for (const auto& o : mine) {
    packed.insert(packed.end(), {static_cast<double>(o.wrong_elements), static_cast<double>(o.first_index), o.got,
                                 o.expected, static_cast<double>(o.source_rank), o.seconds});
  }
  const auto all = all_gather_values(packed, "battery_verdict");
  CollectiveBatteryResult result;
  std::vector<std::string> wrong_cases;
  nlohmann::json wrong_evidence = nlohmann::json::array();
  for (size_t i = 0; i < mine.size(); ++i) {
    CollectiveCheckRow row{mine[i].c, mine[i].route};
    std::optional<int> first_wrong;
    for (int r = 0; r < world().size; ++r) {
      row.seconds = std::max(row.seconds, all[r][kFields * i + 5]);
      if (all[r][kFields * i] > 0) {
        row.wrong_ranks.push_back(r);
        if (!first_wrong) first_wrong = r;
      }
    }
    row.bus_bandwidth_gbps = bus_bandwidth_gbps(row.c.kind, row.c.bytes, row.seconds, world().size);
    if (first_wrong) {
      const auto& w = all[*first_wrong];
      const int source = static_cast<int>(w[kFields * i + 4]);
      wrong_cases.push_back(fmt::format("{} on rank{} {}{}", row.c.name(), row.wrong_ranks.size() > 1 ? "s" : "",
                                        fmt::join(row.wrong_ranks, ","),
                                        source >= 0 ? fmt::format(" (rank {}'s data came back wrong)", source) : ""));
      wrong_evidence.push_back({{"case", row.c.name()},
                                {"kind", to_string(row.c.kind)},
                                {"reduce_op", to_string(row.c.reduce)},
                                {"dtype", c10::toString(row.c.dtype)},
                                {"bytes", row.c.bytes},
                                {"route", row.route},
                                {"wrong_ranks", row.wrong_ranks},
                                {"source_rank", source},
                                {"first_index", w[kFields * i + 1]},
                                {"got", w[kFields * i + 2]},
                                {"expected", w[kFields * i + 3]},
                                {"first_wrong_rank", *first_wrong}});
    }
    result.rows.push_back(std::move(row));
  }
  if (!wrong_cases.empty()) {
    result.findings.push_back(finding("collective_result_mismatch", Severity::fail,
                                      fmt::format("{} of {} exact collective cases wrong (seed {}): {}",
                                                  wrong_cases.size(), mine.size(), seed, fmt::join(wrong_cases, "; ")),
                                      {{"seed", seed}, {"cases", mine.size()}, {"wrong", wrong_evidence}}));
  }
  return result;
}

std::vector<Finding> CrossRankChecks::compare_parameters(const std::vector<torch::Tensor>& params) {
  // Whole replicas: one fingerprint, every rank compared. Split: one per kind of parameter,
  // compared among the ranks that must hold the same values of that kind (SplitModel::peer_key).
  const SplitModel* split = world().split;
  std::vector<std::vector<torch::Tensor>> kinds;
  if (split) {
    kinds.resize(kParameterKinds.size());
    for (const auto& p : params) kinds[static_cast<size_t>(split->kind_of(p))].push_back(p);
  } else {
    kinds.push_back(params);
  }
  std::vector<int64_t> packed;
  for (const auto& kind : kinds) {
    const ParameterFingerprint mine = fingerprint_parameters(kind);
    packed.insert(packed.end(), {std::bit_cast<int64_t>(mine.hash), std::bit_cast<int64_t>(mine.sum)});
  }
  const torch::Tensor all =
      comm().all_gather(torch::tensor(packed, torch::kLong).to(comm().device()), "param_checksum").cpu();
  std::vector<int> odd;
  std::vector<int64_t> hashes;
  std::vector<double> sums;
  std::vector<std::string> distances;
  for (size_t k = 0; k < kinds.size(); ++k) {
    if (kinds[k].empty()) continue;
    std::map<int, std::vector<int>> peers;  // key -> the world ranks that must agree
    for (int r = 0; r < world().size; ++r) peers[split ? split->peer_key(kParameterKinds[k], r) : 0].push_back(r);
    for (const auto& [key, ranks] : peers) {
      std::vector<int64_t> group_hashes;
      for (const int r : ranks) group_hashes.push_back(all[r][2 * k].item<int64_t>());
      std::vector<int> group_odd = ranks_differing_from_majority(group_hashes);
      if (group_odd.empty()) continue;
      const int reference = ranks[first_rank_not_in(group_odd)];
      for (const int i : group_odd) {
        const int r = ranks[i];
        odd.push_back(r);
        const double sum = std::bit_cast<double>(all[r][2 * k + 1].item<int64_t>());
        const double reference_sum = std::bit_cast<double>(all[reference][2 * k + 1].item<int64_t>());
        distances.push_back(split ? fmt::format("rank {} {} sum {:.9g} vs rank {}'s {:.9g}", r,
                                                to_string(kParameterKinds[k]), sum, reference, reference_sum)
                                  : fmt::format("rank {} sum {:.9g} vs {:.9g}", r, sum, reference_sum));
      }
    }
  }
  if (odd.empty()) return {};
  std::sort(odd.begin(), odd.end());
  odd.erase(std::unique(odd.begin(), odd.end()), odd.end());
  for (int r = 0; r < world().size; ++r) {
    hashes.push_back(all[r][0].item<int64_t>());
    sums.push_back(std::bit_cast<double>(all[r][1].item<int64_t>()));
  }
  const int reference = first_rank_not_in(odd);
  return {finding("parameter_divergence", Severity::fail,
                  fmt::format("parameters on rank{} {} are not bitwise identical to rank {}'s ({}): data-parallel "
                              "ranks diverged",
                              odd.size() > 1 ? "s" : "", fmt::join(odd, ","), reference, fmt::join(distances, "; ")),
                  {{"differing_ranks", odd}, {"reference_rank", reference}, {"hashes", hashes}, {"sums", sums}})};
}

std::vector<Finding> CrossRankChecks::compare_collective_sequences() {
  const std::vector<int64_t> sequences =
      comm().exchange_through_store(fmt::format("sequence/{}", ++sequence_checks_), comm().sequence());
  const std::vector<int> odd = ranks_differing_from_majority(sequences);
  if (odd.empty()) return {};
  const int reference = first_rank_not_in(odd);
  std::vector<std::string> counts;
  for (const int r : odd) counts.push_back(fmt::format("rank {} entered {}", r, sequences[r]));
  return {finding("collective_desync", Severity::fail,
                  fmt::format("collective sequence mismatch at step {}: {}, the others {}: a rank skipped or added a "
                              "collective, so later ones pair the wrong data or hang",
                              comm().step(), fmt::join(counts, ", "), sequences[reference]),
                  {{"sequences", sequences}, {"desynchronised_ranks", odd}})};
}

RankStepTimes CrossRankChecks::gather_step_times(double step_time_s, double collective_s) {
  const auto all = all_gather_values({step_time_s, collective_s}, "step_times");
  RankStepTimes times;
  for (const auto& row : all) {
    times.step_s.push_back(row[0]);
    times.busy_s.push_back(std::max(0.0, row[0] - row[1]));
  }
  return times;
}

}  // namespace rcl
