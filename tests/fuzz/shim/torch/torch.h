// Fuzz builds only (tests/fuzz/CMakeLists.txt puts this directory first): libtorch 1.13's full
// <torch/torch.h> does not compile with clang in C++20 (ATen/core/List.h instantiates
// std::vector<c10::IValue> while IValue is incomplete; GCC instantiates lazily). The parsers
// fuzzed here need only the Tensor type their headers name.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch {
using at::Tensor;
}  // namespace torch
