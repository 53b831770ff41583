// A registry of named entries (stress modes, detectors) that tests and extensions add to for a
// while: the built-in entries first, then the added ones in the order added; a Registration
// keeps its entry there until it is destroyed.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rcl {

template <typename Entry>
class Registration;

// Entry has a `name`. Adding and removing are locked; a reader holds the list while no
// registration begins or ends (tests register before the run they check), or takes lock().
template <typename Entry>
class Registry {
 public:
  explicit Registry(std::vector<Entry> builtin) : entries_(std::move(builtin)) {}
  const std::vector<Entry>& entries() const { return entries_; }
  std::unique_lock<std::mutex> lock() const { return std::unique_lock(mutex_); }

 private:
  friend class Registration<Entry>;
  void add(Entry entry) {
    const auto held = lock();
    entries_.push_back(std::move(entry));
  }
  void remove(const std::string& name) {
    const auto held = lock();
    std::erase_if(entries_, [&](const Entry& e) { return e.name == name; });
  }

  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

// Adds `entry` to `registry` until the guard is destroyed.
template <typename Entry>
class [[nodiscard]] Registration {
 public:
  Registration(Registry<Entry>& registry, Entry entry) : registry_(registry), name_(entry.name) {
    registry_.add(std::move(entry));
  }
  ~Registration() { registry_.remove(name_); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  Registry<Entry>& registry_;
  std::string name_;
};

}  // namespace rcl
