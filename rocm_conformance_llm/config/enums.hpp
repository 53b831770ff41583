// The vocabularies of the enum-valued config keys and their JSON form; below the field tables
// because a field's type, default and allowed values are these enums.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "rocm_conformance_llm/base/errors.hpp"
#include "rocm_conformance_llm/base/named_enum.hpp"
#include "rocm_conformance_llm/base/strings.hpp"

namespace rcl {

// The enum-valued keys: each vocabulary's names are its JSON values, its allowed values in
// validate() and `--help-config`, in this order (an ordered one weakest first: stress rules that
// raise it go by this order).
enum class Precision { fp32, bf16, fp16 };
RCL_ENUM_NAMES(Precision, {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"})
enum class PositionEncoding { learned, rotary };
RCL_ENUM_NAMES(PositionEncoding, {PositionEncoding::learned, "learned"}, {PositionEncoding::rotary, "rotary"})
enum class NormKind { layernorm, rmsnorm };
RCL_ENUM_NAMES(NormKind, {NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"})
enum class NormLayout { pre, sandwich };
RCL_ENUM_NAMES(NormLayout, {NormLayout::pre, "pre"}, {NormLayout::sandwich, "sandwich"})
enum class Activation { gelu, swiglu };
RCL_ENUM_NAMES(Activation, {Activation::gelu, "gelu"}, {Activation::swiglu, "swiglu"})
// `automatic` ("auto") is resolved for the run's device and precision before anything reads the
// config (resolve_attention_backend): what runs is always one of the others.
enum class AttentionBackend { automatic, math, sdpa, sdpa_math, sdpa_flash, sdpa_mem_efficient };
RCL_ENUM_NAMES(AttentionBackend, {AttentionBackend::automatic, "auto"}, {AttentionBackend::math, "math"},
               {AttentionBackend::sdpa, "sdpa"}, {AttentionBackend::sdpa_math, "sdpa_math"},
               {AttentionBackend::sdpa_flash, "sdpa_flash"},
               {AttentionBackend::sdpa_mem_efficient, "sdpa_mem_efficient"})
// Deterministic algorithms, ordered off < replay < all.
enum class Determinism { off, replay, all };
RCL_ENUM_NAMES(Determinism, {Determinism::off, "off"}, {Determinism::replay, "replay"}, {Determinism::all, "all"})
// Where the replay check keeps the state it rewinds to.
enum class ReplaySnapshot { host, disk };
RCL_ENUM_NAMES(ReplaySnapshot, {ReplaySnapshot::host, "host"}, {ReplaySnapshot::disk, "disk"})
// Which of the step's GEMMs the checksum check judges.
enum class GemmChecksums { all, rotating, off };
RCL_ENUM_NAMES(GemmChecksums, {GemmChecksums::all, "all"}, {GemmChecksums::rotating, "rotating"},
               {GemmChecksums::off, "off"})
// Data parallelism, ordered by what it shards.
enum class DataParallel { ddp, zero, fsdp };
RCL_ENUM_NAMES(DataParallel, {DataParallel::ddp, "ddp"}, {DataParallel::zero, "zero"}, {DataParallel::fsdp, "fsdp"})
enum class DeviceChoice { automatic, cpu, gpu };
RCL_ENUM_NAMES(DeviceChoice, {DeviceChoice::automatic, "auto"}, {DeviceChoice::cpu, "cpu"}, {DeviceChoice::gpu, "gpu"})
// ROCm knobs; `keep` ("default") leaves the variable as the environment has it.
enum class BlasBackend { keep, hipblaslt, rocblas };
RCL_ENUM_NAMES(BlasBackend, {BlasBackend::keep, "default"}, {BlasBackend::hipblaslt, "hipblaslt"},
               {BlasBackend::rocblas, "rocblas"})
enum class KnobSwitch { keep, on, off };
RCL_ENUM_NAMES(KnobSwitch, {KnobSwitch::keep, "default"}, {KnobSwitch::on, "on"}, {KnobSwitch::off, "off"})
enum class KnobBool { keep, yes, no };
RCL_ENUM_NAMES(KnobBool, {KnobBool::keep, "default"}, {KnobBool::yes, "true"}, {KnobBool::no, "false"})
enum class MiopenFindMode { keep, normal, fast, hybrid, dynamic_hybrid };
RCL_ENUM_NAMES(MiopenFindMode, {MiopenFindMode::keep, "default"}, {MiopenFindMode::normal, "NORMAL"},
               {MiopenFindMode::fast, "FAST"}, {MiopenFindMode::hybrid, "HYBRID"},
               {MiopenFindMode::dynamic_hybrid, "DYNAMIC_HYBRID"})

// ConfigError "invalid WHAT='TEXT': allowed: A, B" unless `text` names a value of E: the same
// line validate() gives for the field WHAT.
template <NamedEnum E>
E parse_enum(const std::string& text, const std::string& what) {
  if (const auto value = parse_name<E>(text)) return *value;
  throw ConfigError("invalid " + what + "='" + text + "': allowed: " + join(names_of<E>()));
}
template <NamedEnum E>
void to_json(nlohmann::json& j, E value) {
  j = name_of(value);
}
template <NamedEnum E>
void from_json(const nlohmann::json& j, E& value) {
  value = parse_enum<E>(j.get<std::string>(), "value");
}

}  // namespace rcl
