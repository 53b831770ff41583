// `--inject SPECS`: the input is the flag's value; an accepted plan prints back to a canonical
// text that parses to the same plan.
#include "fuzz_support.hpp"

#include "rocm_conformance_llm/faults/fault_plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rcl::fuzz::expect_accepted_or_refused([&] {
    const auto plan = rcl::FaultPlan::parse(rcl::fuzz::text_of(data, size));
    if (rcl::FaultPlan::parse(plan.to_string()).to_string() != plan.to_string()) std::abort();
  });
  return 0;
}
