#!/usr/bin/env python3
"""Fails when a source file includes a layer above its own (docs/ARCHITECTURE.md).

    python3 scripts/check_layers.py [ROOT]    # ROOT: the repository (default: this one)

Every file under rocm_conformance_llm/ belongs to one layer: its folder's, or, for the files the
specification names at the package's top (train, model, data, stress_modes, config), the layer
listed below. A file may include its own layer and the layers below it; each include of a layer
above is printed as FILE:LINE: includes HEADER (layer X above layer Y), and the exit status is 1.

A layer's sub-folders are ordered the same way (SUB_LAYERS): a file in one may include its own
sub-folder and those below it; each include of one above is printed as
FILE:LINE: includes HEADER (sub-layer L/X above sub-layer L/Y). A sub-folder no entry declares,
like a folder no layer claims, is an error.
"""
import pathlib
import re
import sys

# Bottom up. A folder is a layer; utils/ is the specification's own name for part of the base, and
# config/ holds the pieces of the top-level config.* and stress_modes.*.
LAYERS = ["base", "config", "platform", "workload", "transport", "loop", "faults", "checks", "reports", "run"]
FOLDER_LAYER = {"base": "base", "utils": "base", "config": "config", "platform": "platform", "workload": "workload",
                "transport": "transport", "loop": "loop", "faults": "faults", "checks": "checks",
                "reports": "reports", "run": "run"}
# A layer's sub-folders, bottom up; every file of a layer listed here is in one of them.
SUB_LAYERS = {"checks": ["findings", "detectors", "monitors"]}
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


def sub_layer_of(relative: str, layer: str) -> str:
    """The sub-folder of `layer` a path is in ("" for a layer without any); ValueError for a
    sub-folder SUB_LAYERS does not declare, or a file beside the declared ones."""
    parts = relative.split("/")
    declared = SUB_LAYERS.get(layer, [])
    if len(parts) <= 2 and not declared:
        return ""
    if len(parts) > 2 and parts[1] in declared:
        return parts[1]
    raise ValueError(f"{PACKAGE}/{relative} is in no sub-layer of {layer} "
                     f"(scripts/check_layers.py declares {', '.join(declared) or 'none'})")


def violations(root: pathlib.Path):
    package = root / PACKAGE
    for path in sorted(package.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h"):
            continue
        relative = path.relative_to(package).as_posix()
        own = layer_of(relative)
        own_sub = sub_layer_of(relative, own)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            included = match.group(1)[len(PACKAGE) + 1:]
            target = layer_of(included)
            where = f"{path.relative_to(root)}:{number}: includes {match.group(1)}"
            if LAYERS.index(target) > LAYERS.index(own):
                yield f"{where} (layer {target} above layer {own})"
            elif target == own and own_sub:
                target_sub = sub_layer_of(included, target)
                if SUB_LAYERS[own].index(target_sub) > SUB_LAYERS[own].index(own_sub):
                    yield f"{where} (sub-layer {own}/{target_sub} above sub-layer {own}/{own_sub})"


def sub_layer_order() -> str:
    return "; ".join(f"{layer}: {' < '.join(subs)}" for layer, subs in SUB_LAYERS.items())


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
        print(f"check_layers: {len(found)} include(s) of a layer or sub-layer above the includer's "
              f"(layers bottom up: {', '.join(LAYERS)}; {sub_layer_order()})", file=sys.stderr)
        return 1
    print(f"check_layers: every include goes to the same layer or below ({' < '.join(LAYERS)}; "
          f"{sub_layer_order()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
