// What a run attaches to its trainer, in which order, and why. The trainer calls its observers,
// and its hooks, in the order they were added, so that order is behaviour: it is this table,
// each slot with its reason, and the runner and the tests attach their parts through it in
// whatever order they build them.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "rocm_conformance_llm/checks/findings/detector.hpp"
#include "rocm_conformance_llm/loop/step_hooks.hpp"
#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl {

class Trainer;

// How a slot's parts are attached: as StepObserver (hear every published step), as StepHooks
// (called at fixed points inside the step), or as both.
enum class Attach { observer, hooks, both };

struct WiringSlot {
  std::string_view part;
  Attach attach;
  std::string_view reason;  // why it sits where it does
};

// The slots' names, for RunWiring::add.
namespace part {
inline constexpr std::string_view run_summary = "run_summary";
inline constexpr std::string_view metrics = "metrics";
inline constexpr std::string_view prometheus = "prometheus";
inline constexpr std::string_view console = "console";
inline constexpr std::string_view training_collectives = "training_collectives";
inline constexpr std::string_view job_records = "job_records";
inline constexpr std::string_view host_read_count = "host_read_count";
inline constexpr std::string_view fault_injector = "fault_injector";
inline constexpr std::string_view detectors = "detectors";
inline constexpr std::string_view memory_profile = "memory_profile";
inline constexpr std::string_view node_monitor = "node_monitor";
inline constexpr std::string_view watchdog = "watchdog";
inline constexpr std::string_view checkpointer = "checkpointer";
}  // namespace part

// Every slot, in the order the trainer calls their parts.
std::span<const WiringSlot> run_wiring();

// One run's parts, gathered in any order; attached in run_wiring()'s order, the parts of one
// slot (the detectors) in the order given.
class RunWiring {
 public:
  struct Attachment {
    std::size_t slot = 0;              // index in run_wiring()
    StepObserver* observer = nullptr;  // null: not attached as one
    StepHooks* hooks = nullptr;
    std::string name;   // the slot's, or a detector's catalog name
    HookPoints points;  // where in the step it acts (hook_points_of)
  };

  // std::logic_error when `slot` is no slot's name or `p` is not what the slot attaches it as.
  // `name`: how --explain-step names it (default: the slot's name; a detector's own).
  template <typename Part>
  void add(std::string_view slot, Part* p, std::string name = "") {
    StepObserver* observer = nullptr;
    StepHooks* hooks = nullptr;
    if constexpr (std::is_base_of_v<StepObserver, Part>) observer = p;
    if constexpr (std::is_base_of_v<StepHooks, Part>) hooks = p;
    if constexpr (std::is_base_of_v<Detector, Part>) add(slot, observer, hooks, p->name(), p->hook_points());
    else add(slot, observer, hooks, name.empty() ? std::string(slot) : std::move(name), hook_points_of<Part>());
  }
  // For --explain-step: a part of type Part the run attaches at `slot`, listed where it would act
  // but neither built nor attached (it writes the run's files, or starts a thread).
  template <typename Part>
  void describe(std::string_view slot) {
    add(slot, nullptr, nullptr, std::string(slot), hook_points_of<Part>(), /*built=*/false);
  }

  // What attach_to adds, in its order.
  std::vector<Attachment> in_order() const;
  void attach_to(Trainer& trainer) const;

 private:
  void add(std::string_view slot, StepObserver* observer, StepHooks* hooks, std::string name, HookPoints points,
           bool built = true);
  std::vector<Attachment> added_;
};

}  // namespace rcl
