// How the platform layer opens ROCm libraries at run time: dlopen, dlsym, and an SMI library's
// start-up with its stderr chatter captured. Internal to platform/: shared by rocm_dlopen.cpp
// (HIP, ROCm SMI) and amd_smi.cpp, which needs no ROCm header.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>

#include <spdlog/spdlog.h>

#include "rocm_conformance_llm/platform/rocm_dlopen.hpp"

namespace rcl::dlopen_support {

// The first of `names` that loads; handles stay open for the process's life.
inline void* open_library(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  return nullptr;
}

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  return handle ? reinterpret_cast<Fn>(dlsym(handle, name)) : nullptr;
}

// Runs `fn` with file descriptor 2 pointed at a temporary file; returns what was written there.
template <typename Fn>
std::string capture_stderr(Fn&& fn) {
  std::fflush(stderr);
  std::cerr.flush();
  FILE* sink = std::tmpfile();
  const int saved = sink ? dup(2) : -1;
  if (saved < 0) {
    if (sink) std::fclose(sink);
    fn();
    return {};
  }
  dup2(fileno(sink), 2);
  fn();
  std::fflush(stderr);
  std::cerr.flush();
  dup2(saved, 2);
  close(saved);
  std::string text;
  std::rewind(sink);
  for (int c; (c = std::fgetc(sink)) != EOF;) text += static_cast<char>(c);
  std::fclose(sink);
  return text;
}

// Opens an SMI library ($`override_var`, else the first of `names` that loads) and runs `init` on
// it (returns "" or why it failed), with the library's start-up chatter on stderr ("Failed to
// open drm root directory /sys/class/drm" on a machine without amdgpu) sent to the debug log.
template <typename Init>
void* open_smi_library(SmiStatus& status, const char* override_var, std::initializer_list<const char*> names,
                       Init&& init) {
  const char* override_path = std::getenv(override_var);
  void* lib = nullptr;
  const std::string noise = capture_stderr([&] {
    status.library = override_path ? override_path : *names.begin();
    lib = override_path ? dlopen(override_path, RTLD_NOW | RTLD_LOCAL) : open_library(names);
    const std::string failed = lib ? std::string(init(lib)) : status.library + " not found";
    status.available = failed.empty();
    status.reason = failed;
  });
  if (!noise.empty()) spdlog::debug("{} start-up output (not shown on the console): {}", status.library, noise);
  return status.available ? lib : nullptr;
}

}  // namespace rcl::dlopen_support
