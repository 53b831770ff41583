#!/usr/bin/env python3
"""Fails when a source file includes a layer above its own (docs/ARCHITECTURE.md).

    python3 scripts/check_layers.py [ROOT]    # ROOT: the repository (default: this one)

Every file under rocm_conformance_llm/ belongs to one layer: its folder's, or, for the files the
specification names at the package's top (train, model, data, stress_modes, config), the layer
listed below. A file may include its own layer and the layers below it; each include of a layer
above is printed as FILE:LINE: includes HEADER (layer X above layer Y), and the exit status is 1.
"""
import pathlib
import re
import sys

# Bottom up. A folder is a layer; utils/ is the specification's own name for part of the base.
LAYERS = ["base", "config", "platform", "workload", "transport", "loop", "faults", "checks", "reports", "run"]
FOLDER_LAYER = {"base": "base", "utils": "base", "platform": "platform", "workload": "workload",
                "transport": "transport", "loop": "loop", "faults": "faults", "checks": "checks",
                "reports": "reports", "run": "run"}
# The specification's layout keeps these at the package's top.
TOP_LEVEL_LAYER = {"config": "config", "stress_modes": "config", "model": "workload", "data": "workload",
                   "train": "run"}
PACKAGE = "rocm_conformance_llm"
INCLUDE = re.compile(r'^\s*#\s*include\s+"(' + PACKAGE + r'/[^"]+)"')


def layer_of(relative: str) -> str:
    """The layer of a path relative to the package; ValueError for one no layer claims."""
    parts = relative.split("/")
    if len(parts) == 1:
        stem = parts[0].split(".")[0]
        if stem in TOP_LEVEL_LAYER:
            return TOP_LEVEL_LAYER[stem]
    elif parts[0] in FOLDER_LAYER:
        return FOLDER_LAYER[parts[0]]
    raise ValueError(f"{PACKAGE}/{relative} is in no layer (scripts/check_layers.py lists them)")


def violations(root: pathlib.Path):
    package = root / PACKAGE
    for path in sorted(package.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h"):
            continue
        own = layer_of(path.relative_to(package).as_posix())
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = layer_of(match.group(1)[len(PACKAGE) + 1:])
            if LAYERS.index(target) > LAYERS.index(own):
                yield (f"{path.relative_to(root)}:{number}: includes {match.group(1)} "
                       f"(layer {target} above layer {own})")


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    try:
        found = list(violations(root))
    except ValueError as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 1
    for v in found:
        print(v, file=sys.stderr)
    if found:
        print(f"check_layers: {len(found)} include(s) of a layer above the includer's "
              f"(layers bottom up: {', '.join(LAYERS)})", file=sys.stderr)
        return 1
    print(f"check_layers: every include goes to the same layer or below ({' < '.join(LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
