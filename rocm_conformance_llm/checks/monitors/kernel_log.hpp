// amdgpu lines in the kernel log during a run (GPU reset, ring timeout, VM page fault, RAS/ECC
// event, XGMI error): the driver's side of a failure the job only sees as a hang or a crash.
// Read from /dev/kmsg (records after the run started) or, where that is not readable, from
// `dmesg`; unreadable is a logged skip, never an error. A recorded log file goes through the
// same parser (tests, or a log saved on another node).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rocm_conformance_llm/checks/findings/finding_log.hpp"

namespace rcl {

// One kernel log line recognised as an amdgpu failure signature.
struct KernelLogMatch {
  std::string
      signature;  // kernel_gpu_reset | kernel_ring_timeout | kernel_page_fault | kernel_ras_event | kernel_xgmi_error
  Severity severity = Severity::fail;
  std::string line;  // the message, without the /dev/kmsg record prefix
};

// nullopt for lines that are not from amdgpu or match no signature.
std::optional<KernelLogMatch> classify_kernel_line(std::string_view line);

// New kernel log lines since the source was opened.
class KernelLogSource {
 public:
  virtual ~KernelLogSource() = default;
  virtual std::vector<std::string> read_new_lines() = 0;
};

struct OpenedKernelLog {
  std::unique_ptr<KernelLogSource> source;  // null when skipped
  std::string description;                  // "/dev/kmsg", "dmesg", "file PATH", or why it was skipped
};
// `setting`: diagnostics.kernel_log_source ("auto", "off" or a file path).
OpenedKernelLog open_kernel_log(const std::string& setting);

// The finding for `match`, seen at `step` on `rank`, with the line as evidence.
Finding kernel_log_finding(const KernelLogMatch& match, const std::string& source, int64_t step, int rank);

}  // namespace rcl
