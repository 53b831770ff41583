// Keeps every step record the loop hands its observers, for tests that judge a run's steps.
#pragma once

#include <vector>

#include "rocm_conformance_llm/loop/step_record.hpp"

namespace rcl::test {

class StepRecorder final : public StepObserver {
 public:
  void on_step(const StepRecord& r) override { records.push_back(r); }
  std::vector<StepRecord> records;
};

}  // namespace rcl::test
