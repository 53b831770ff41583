#!/usr/bin/env python3
"""scripts/check_layers.py passes on this tree and fails, naming the include, on a copy of it
with one upward include planted (a base file including the run layer)."""
import pathlib
import shutil
import subprocess
import sys
import tempfile

repo = pathlib.Path(sys.argv[1])
script = repo / "scripts" / "check_layers.py"


def check(root):
    return subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True)


clean = check(repo)
assert clean.returncode == 0, f"the tree itself fails the layer check:\n{clean.stderr}"

with tempfile.TemporaryDirectory() as tmp:
    copy = pathlib.Path(tmp)
    shutil.copytree(repo / "rocm_conformance_llm", copy / "rocm_conformance_llm")
    planted = copy / "rocm_conformance_llm" / "base" / "strings.hpp"
    lines = planted.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("#include"))
    lines.insert(at, '#include "rocm_conformance_llm/run/job.hpp"\n')
    planted.write_text("".join(lines))
    upward = check(copy)
    assert upward.returncode == 1, f"exit {upward.returncode} for a planted upward include"
    expected = f"rocm_conformance_llm/base/strings.hpp:{at + 1}: includes rocm_conformance_llm/run/job.hpp"
    assert expected in upward.stderr, f"the planted include is not named:\n{upward.stderr}"

    # A file in a folder no layer claims is an error too, not a silent pass.
    (copy / "rocm_conformance_llm" / "base" / "strings.hpp").write_text("".join(lines[:at] + lines[at + 1:]))
    stray = copy / "rocm_conformance_llm" / "misc"
    stray.mkdir()
    (stray / "x.hpp").write_text("#pragma once\n")
    unclaimed = check(copy)
    assert unclaimed.returncode == 1 and "misc/x.hpp is in no layer" in unclaimed.stderr, unclaimed.stderr
print("layer check: passes here, fails on a planted upward include and on an unclaimed folder")
