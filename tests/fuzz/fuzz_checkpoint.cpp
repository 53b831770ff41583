// The checkpoint reader `--resume` runs before anything else (run/run_checkpoint.cpp, base/safetensors.cpp).
// The first byte picks the file the rest of the input becomes; the other files are a real smoke
// checkpoint's (the seed corpus holds one, from scripts/fuzz.sh):
//   0: state.json, with a manifest whose SHA-256 match, so the state itself is parsed and
//      compared with this run (the smoke preset on CPU)
//   1: manifest.json
//   2: a safetensors file, read by read_safetensors
#include "fuzz_support.hpp"

#include "rocm_conformance_llm/base/safetensors.hpp"
#include "rocm_conformance_llm/base/sha256.hpp"
#include "rocm_conformance_llm/run/run_checkpoint.hpp"

namespace {

namespace fs = std::filesystem;

// A checkpoint the reader accepts, apart from state.json / manifest.json (written per input).
constexpr const char* kStep = "step-00000001";
constexpr const char* kFixedFiles[] = {"model.safetensors", "optimizer.safetensors", "rank-0.safetensors",
                                       "config.json"};

const rcl::RunIdentity& smoke_identity() {
  static const rcl::RunIdentity identity = [] {
    const char* argv[] = {"rocm-conformance-llm", "--preset", "smoke", "--device", "cpu"};
    int exit_code = 0;
    const auto run = rcl::resolve_run_config(*rcl::parse_cli(5, argv, exit_code), false);
    return rcl::RunIdentity{nlohmann::json(run.training), run.stress_modes, 1};
  }();
  return identity;
}

// The fixed files come from RCL_FUZZ_CHECKPOINT (a real checkpoint directory), once.
fs::path checkpoint_dir() {
  static const fs::path dir = [] {
    const char* from = std::getenv("RCL_FUZZ_CHECKPOINT");
    if (from == nullptr) {
      std::fprintf(stderr, "set RCL_FUZZ_CHECKPOINT to a smoke checkpoint directory (scripts/fuzz.sh does)\n");
      std::exit(2);
    }
    const fs::path d = rcl::fuzz::scratch() / kStep;
    fs::create_directories(d);
    for (const char* name : kFixedFiles)
      fs::copy_file(fs::path(from) / name, d / name, fs::copy_options::overwrite_existing);
    fs::copy_file(fs::path(from) / "state.json", d / "state.json.good", fs::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

std::string manifest_of(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const char* name : kFixedFiles) files[name] = rcl::sha256_of_file((dir / name).string());
  files["state.json"] = rcl::sha256_of_file((dir / "state.json").string());
  return nlohmann::json{{"format", "rocm-conformance-llm checkpoint"}, {"files", files}}.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest = rcl::fuzz::text_of(data + 1, size - 1);
  const fs::path dir = checkpoint_dir();
  switch (data[0] % 3) {
    case 0:
      rcl::fuzz::write_file(dir / "state.json", rest);
      rcl::fuzz::write_file(dir / "manifest.json", manifest_of(dir));
      break;
    case 1:
      fs::copy_file(dir / "state.json.good", dir / "state.json", fs::copy_options::overwrite_existing);
      rcl::fuzz::write_file(dir / "manifest.json", rest);
      break;
    default:
      rcl::fuzz::write_file(dir / "input.safetensors", rest);
      rcl::fuzz::expect_accepted_or_refused([&] { rcl::read_safetensors(dir / "input.safetensors"); });
      return 0;
  }
  rcl::fuzz::expect_accepted_or_refused(
      [&] { rcl::resolve_resume(dir.string(), dir.parent_path(), smoke_identity()); });
  return 0;
}
