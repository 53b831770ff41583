#!/usr/bin/env python3
"""scripts/check_layers.py passes on this tree and fails, naming the include, on a copy of it
with one upward include planted (a base file including the run layer), with one planted inside a
layer (a file of the findings sub-folder of checks including a detector), and with a folder no
layer or sub-layer claims."""
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


def plant(package, file, header):
    """Adds `#include "header"` before the first include of `file`; returns its line number and
    a function that takes it out again."""
    path = package / file
    original = path.read_text()
    lines = original.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("#include"))
    lines.insert(at, f'#include "rocm_conformance_llm/{header}"\n')
    path.write_text("".join(lines))
    return at + 1, lambda: path.write_text(original)


def expect_named(root, file, line, header, reason):
    result = check(root)
    assert result.returncode == 1, f"exit {result.returncode} for an upward include planted in {file}"
    expected = f"rocm_conformance_llm/{file}:{line}: includes rocm_conformance_llm/{header} ({reason})"
    assert expected in result.stderr, f"the planted include is not named as\n{expected}\n{result.stderr}"


with tempfile.TemporaryDirectory() as tmp:
    copy = pathlib.Path(tmp)
    package = copy / "rocm_conformance_llm"
    shutil.copytree(repo / "rocm_conformance_llm", package)

    line, take_out = plant(package, "base/strings.hpp", "run/job.hpp")
    expect_named(copy, "base/strings.hpp", line, "run/job.hpp", "layer run above layer base")
    take_out()

    # Inside a layer: the finding log must not reach up to a detector.
    line, take_out = plant(package, "checks/findings/finding_log.cpp", "checks/detectors/numerics.hpp")
    expect_named(copy, "checks/findings/finding_log.cpp", line, "checks/detectors/numerics.hpp",
                 "sub-layer checks/detectors above sub-layer checks/findings")
    take_out()
    assert check(copy).returncode == 0, "the copy still fails with every planted include taken out"

    # A file in a folder no layer claims, or in a sub-folder no layer declares, is an error too,
    # not a silent pass.
    for folder, complaint in [("misc", "misc/x.hpp is in no layer"),
                              ("checks/misc", "checks/misc/x.hpp is in no sub-layer of checks")]:
        stray = package / folder
        stray.mkdir()
        (stray / "x.hpp").write_text("#pragma once\n")
        unclaimed = check(copy)
        assert unclaimed.returncode == 1 and complaint in unclaimed.stderr, unclaimed.stderr
        shutil.rmtree(stray)
print("layer check: passes here, fails on a planted upward include across layers and inside one, "
      "and on an unclaimed folder or sub-folder")
