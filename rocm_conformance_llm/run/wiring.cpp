#include "rocm_conformance_llm/run/wiring.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "rocm_conformance_llm/loop/trainer.hpp"

namespace rcl {

namespace {

constexpr std::array kRunWiring = {
    WiringSlot{part::run_summary, Attach::observer,
               "first: a crash report, written when any later part fails, has every finished step"},
    WiringSlot{part::metrics, Attach::observer,
               "before the checks: a step whose check ends the run still has its metrics.jsonl line"},
    WiringSlot{part::prometheus, Attach::observer, "before the checks, as metrics.jsonl"},
    WiringSlot{part::console, Attach::observer,
               "before the checks, as metrics.jsonl: the step is shown even when a check of it ends the run"},
    WiringSlot{part::training_collectives, Attach::observer,
               "before the checks, as metrics.jsonl: a crash's or a hang's report counts the collectives of the "
               "step a check of it ended"},
    WiringSlot{part::job_records, Attach::observer,
               "before the checks, as metrics.jsonl: a rank a check of a step stops is still a row with that "
               "step in rank 0's job report (its last heartbeat through the store)"},
    WiringSlot{part::host_read_count, Attach::hooks,
               "first hooks (diagnostics.count_host_reads): a step's window of blocking reads opens before any "
               "other hook of it can read"},
    WiringSlot{part::fault_injector, Attach::hooks,
               "before every check: at each hook point the fault strikes first, so the checks see it"},
    WiringSlot{part::detectors, Attach::both,
               "the checks, in the registry's order, after the injector (they see its faults); each one's "
               "cross-rank preflight ran before the checkpoint load, which comes after everything that draws "
               "random numbers at start-up"},
    WiringSlot{part::memory_profile, Attach::observer,
               "after the checks; reads only the step's record, so its place among them does not matter"},
    WiringSlot{part::node_monitor, Attach::observer,
               "after the checks; notes only the step number its samples belong to"},
    WiringSlot{part::watchdog, Attach::both,
               "last observer: a step is a heartbeat only once every check of it has returned, so a check "
               "stuck in its on_step is a hang of that step"},
    WiringSlot{part::checkpointer, Attach::hooks,
               "last: a checkpoint holds the state after every check between steps (a replay rewinds)"},
};

bool attaches_observer(Attach a) { return a != Attach::hooks; }
bool attaches_hooks(Attach a) { return a != Attach::observer; }

}  // namespace

std::span<const WiringSlot> run_wiring() { return kRunWiring; }

void RunWiring::add(std::string_view slot, StepObserver* observer, StepHooks* hooks, std::string name,
                    HookPoints points, bool built) {
  const auto it =
      std::find_if(kRunWiring.begin(), kRunWiring.end(), [&](const WiringSlot& s) { return s.part == slot; });
  if (it == kRunWiring.end()) throw std::logic_error("no wiring slot '" + std::string(slot) + "'");
  const auto index = static_cast<std::size_t>(it - kRunWiring.begin());
  const Attach attach = it->attach;
  if (built && ((attaches_observer(attach) && !observer) || (attaches_hooks(attach) && !hooks)))
    throw std::logic_error("wiring slot '" + std::string(slot) + "' takes a part it cannot attach");
  // A part acts where its slot attaches it: a slot of observers never calls its hooks.
  if (!attaches_observer(attach)) points.reset(size_t(HookPoint::published));
  if (!attaches_hooks(attach)) points &= HookPoints().set(size_t(HookPoint::published));
  added_.push_back({.slot = index,
                    .observer = attaches_observer(attach) ? observer : nullptr,
                    .hooks = attaches_hooks(attach) ? hooks : nullptr,
                    .name = std::move(name),
                    .points = points});
}

std::vector<RunWiring::Attachment> RunWiring::in_order() const {
  std::vector<Attachment> ordered = added_;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Attachment& a, const Attachment& b) { return a.slot < b.slot; });
  return ordered;
}

void RunWiring::attach_to(Trainer& trainer) const {
  for (const auto& a : in_order()) {
    if (a.observer) trainer.add_observer(a.observer);
    if (a.hooks) trainer.add_hooks(a.hooks);
  }
}

}  // namespace rcl
