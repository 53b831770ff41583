#!/usr/bin/env bash
# Fetches, for the GPU machine's Python (3.12; no network there), the wheels bench/hf_peer.py
# needs beyond the torch it already has: Transformers and Accelerate at the wheel lane's pins
# (scripts/wheel/requirements.txt) with their dependencies, into .gpucarry/hf-wheels (git-ignored).
# Datasets is left out: its pyarrow alone is 53 MB of the 64 MiB a device call carries, beside
# the carried build's 16 MB; the peer then reads the same windows without it and says so.
#   bash scripts/gpu/carry_hf_wheels.sh            # where pip reaches the index
#   python3 -m pip install --no-index --find-links .gpucarry/hf-wheels --target /tmp/hf \
#       transformers accelerate                    # on the GPU machine; then PYTHONPATH=/tmp/hf
# The machine's python3 must already have torch 2.11 and numpy (checked offline with Python
# 3.12.1 here: transformers 5.24 installs from these wheels and imports).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.gpucarry/hf-wheels
python=${PYTHON:-/var/cache/rocm-conformance-llm/wheel-venv/bin/python}
[[ -x "$python" ]] || { echo "carry_hf_wheels: no wheel-lane python at $python: run scripts/wheel/env.sh first"; exit 2; }
pin() { grep -E "^$1==" scripts/wheel/requirements.txt; }
rm -rf "$dest" && mkdir -p "$dest"
# pip resolves for the target Python (metadata only); what torch 2.11 itself needs is on the GPU
# machine already, so torch, its CUDA libraries and its own requirements are left out.
report=$(mktemp)
trap 'rm -f "$report"' EXIT
target=(--only-binary=:all: --python-version 3.12 --platform any --platform manylinux2014_x86_64)
for glibc in $(seq 17 39); do target+=(--platform "manylinux_2_${glibc}_x86_64"); done  # the machine: glibc 2.39
"$python" -m pip install -q --dry-run --ignore-installed --target "$dest/.resolve" --report "$report" \
  "${target[@]}" "$(pin torch)" "$(pin transformers)" "$(pin accelerate)" "$(pin safetensors)"
mapfile -t wanted < <("$python" - "$report" <<'PY'
import json, re, sys
items = json.load(open(sys.argv[1]))["install"]
def name(requirement):
    return re.split(r"[<>=!~;\[ (]", requirement, maxsplit=1)[0].lower().replace("_", "-")
requires = {name(i["metadata"]["name"]): [name(r) for r in i["metadata"].get("requires_dist", []) if "extra ==" not in r]
            for i in items}
# torch and everything its wheel pulls in are on the machine; numpy too (the header's precondition).
torch_own, todo = {"numpy"}, ["torch"]
while todo:
    dep = todo.pop()
    if dep not in torch_own:
        torch_own.add(dep)
        todo += requires.get(dep, [])
for item in items:
    meta = item["metadata"]
    name = meta["name"].lower().replace("_", "-")
    if name not in torch_own and not name.startswith(("nvidia-", "cuda-")):
        print(f"{name}=={meta['version']}")
PY
)
"$python" -m pip download -q --no-deps "${target[@]}" -d "$dest" "${wanted[@]}"
rm -rf "$dest/.resolve"
echo "carry_hf_wheels: $(ls "$dest" | wc -l) wheels -> $dest ($(du -sh "$dest" | cut -f1))"
