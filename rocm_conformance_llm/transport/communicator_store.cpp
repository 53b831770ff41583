// What ranks pass through the rendezvous store rather than the collective transport: value
// exchanges and job-level records, which must still travel when the collectives no longer line up.
#include "rocm_conformance_llm/transport/communicator_impl.hpp"

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {
namespace {

std::string record_key(const std::string& name, int rank) { return fmt::format("record/{}/{}", name, rank); }

// `work` on a helper thread that owns what it uses, given at most `limit`: a store blocked by a
// stopped peer must not hold the caller. nullopt when it did not finish in time.
template <typename T>
std::optional<T> within_limit(std::chrono::milliseconds limit, std::function<T()> work) {
  auto result = std::make_shared<std::promise<T>>();
  auto future = result->get_future();
  std::thread([work = std::move(work), result] {
    try {
      result->set_value(work());
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (future.wait_for(limit) != std::future_status::ready) return std::nullopt;
  try {
    return future.get();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

// Rank 0 gathers the values and publishes them under one key: O(world) store requests per
// exchange rather than O(world^2), which matters with hundreds of ranks on one store server.
std::vector<int64_t> Communicator::exchange_through_store(const std::string& name, int64_t value) {
  Impl& d = *impl_;
  const std::string prefix = "exchange/" + name + "/";
  std::vector<std::string> keys;
  for (int r = 0; r < d.world_size; ++r) keys.push_back(prefix + std::to_string(r));
  const std::string combined_key = prefix + "all";
  const auto started = SteadyClock::now();
  std::string combined;
  try {
    d.store->set(keys[d.rank], to_bytes(std::to_string(value)));
    if (d.rank == 0) {
      d.store->wait(keys, d.timeout);
      for (const auto& key : keys) combined += from_bytes(d.store->get(key)) + " ";
      d.store->set(combined_key, to_bytes(combined));
      for (const auto& key : keys) d.store->deleteKey(key);
    } else {
      d.store->wait({combined_key}, d.timeout);
      combined = from_bytes(d.store->get(combined_key));
    }
  } catch (const std::exception& e) {
    // Whose value never came; with every value in, rank 0 itself stopped before publishing.
    std::vector<int> missing;
    try {
      for (int r = 0; r < d.world_size; ++r) {
        if (!d.store->check({keys[r]})) missing.push_back(r);
      }
      if (missing.empty()) missing.push_back(0);
    } catch (const std::exception&) {
      // The store itself is gone: `error` below says so.
    }
    throw CollectiveError(d.failure(
        "exchange_timeout",
        fmt::format("{}: store exchange '{}' at step {} failed after {:.1f} s: {} did not arrive [{}]", d.who(d.rank),
                    name, d.step, seconds_since(started),
                    missing.empty() ? std::string("rank (unknown)") : d.ranks_clause(missing), first_line(e.what())),
        {{"exchange", name},
         {"missing_ranks", missing},
         {"missing_world_ranks", d.world_ranks_of(missing)},
         {"error", e.what()}}));
  }
  std::vector<int64_t> values;
  std::istringstream in(combined);
  for (int64_t v = 0; in >> v;) values.push_back(v);
  // The last rank to read removes the combined key, so long runs do not grow the store.
  try {
    if (d.store->add(prefix + "done", 1) == d.world_size) {
      d.store->deleteKey(combined_key);
      d.store->deleteKey(prefix + "done");
    }
  } catch (const std::exception&) {
    // Cleanup only; the values are already read.
  }
  return values;
}

bool Communicator::put_record(const std::string& name, const std::string& value, std::chrono::milliseconds limit) {
  const std::string key = record_key(name, impl_->world_rank_of(impl_->rank));
  const auto done = within_limit<bool>(limit, [store = impl_->store, key, value] {
    store->set(key, to_bytes(value));
    return true;
  });
  return done.value_or(false);
}

std::vector<std::optional<std::string>> Communicator::collect_records(const std::string& name,
                                                                      std::chrono::milliseconds limit,
                                                                      const std::vector<int>& only) const {
  using Records = std::vector<std::optional<std::string>>;
  const int world = static_cast<int>(impl_->world_ranks.size());
  std::vector<int> wanted = only;
  if (wanted.empty())
    for (int r = 0; r < world; ++r) wanted.push_back(r);
  // What arrived so far, shared with the helper: a store that stops answering mid-way still
  // leaves the records already read.
  auto got = std::make_shared<std::pair<std::mutex, Records>>();
  got->second.resize(world);
  const auto deadline = SteadyClock::now() + limit;
  within_limit<bool>(limit, [store = impl_->store, name, wanted, got, deadline] {
    for (;;) {
      bool all = true;
      for (const int r : wanted) {
        {
          std::lock_guard<std::mutex> lock(got->first);
          if (got->second[r]) continue;
        }
        const std::string key = record_key(name, r);
        if (store->check({key})) {
          std::string value = from_bytes(store->get(key));
          std::lock_guard<std::mutex> lock(got->first);
          got->second[r] = std::move(value);
        } else {
          all = false;
        }
      }
      if (all || SteadyClock::now() >= deadline) return all;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::lock_guard<std::mutex> lock(got->first);
  return got->second;
}

}  // namespace rcl
