#!/usr/bin/env bash
# Tokenizes a corpus once into Megatron's indexed dataset for `--data PREFIX` (docs/data.md):
#   bash scripts/prepare_data.sh --tokenizer tokenizer.json --output PREFIX INPUT... [--text-field F] [--workers N]
# The first call makes its own Python environment with the pinned `datasets` and `tokenizers`
# from the package index (cached; nothing is fetched after that). RCL_DATA_VENV names another
# environment that already has them (the test command points it at the wheel lane's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${RCL_DATA_VENV:-/var/cache/rocm-conformance-llm/data-venv}
pins=(datasets==5.2.0 tokenizers==0.23.3 numpy==2.4.6)
if ! "$venv/bin/python" -c "import datasets, tokenizers, numpy" 2>/dev/null; then
  echo "prepare_data: making $venv (${pins[*]})" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
fi
exec "$venv/bin/python" "$here/prepare_data.py" "$@"
