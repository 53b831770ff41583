#!/usr/bin/env python3
"""Writes docs/generated/fit-table.md: every composition of the stress modes on `smoke` (the CPU,
no fit) and on `small` and `large` fitted to posed 80 GB and 192 GB GPUs, with the predicted peak
and what the fit did. Every figure is the binary's own (`--print-config`: its "sizing" and "fit"
sections), so the table is the product's prediction, composed with this binary's capabilities.

    scripts/fit_table.py [BINARY] [OUTPUT]   (defaults: build/rocm-conformance-llm, docs/generated/fit-table.md)
"""
import itertools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (column heading, preset, --device-memory or None for the CPU)
TARGETS = [
    ("smoke, CPU", "smoke", None),
    ("small, 80 GB", "small", "80GB"),
    ("small, 192 GB", "small", "192GB"),
    ("large, 80 GB", "large", "80GB"),
    ("large, 192 GB", "large", "192GB"),
]


def gib(n):
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def print_config(binary, preset, modes, memory):
    cmd = [str(binary), "--print-config", "--preset", preset, "--stress", ",".join(modes)]
    if memory:
        cmd += ["--device-memory", memory]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 2) or not proc.stdout.strip():  # 2: shown, then refused
        sys.exit(f"error: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def cell(doc):
    fit = doc["fit"]
    if fit is None:
        return gib(doc["sizing"]["peak_bytes"])
    before = fit["predicted_before_fit"]["peak_bytes"]
    if not fit["fits"]:
        return f"**refused**: {gib(fit['predicted']['peak_bytes'])}"
    changes = fit["changes"]
    if not changes:
        return gib(before)
    steps = ["whole blocks"] if "checkpoint_keep_attention" in changes else []
    if "batch_size" in changes:
        steps.append(f"batch {changes['batch_size'][0]}->{changes['batch_size'][1]}")
    return f"{gib(before)} -> {', '.join(steps)}: {gib(fit['predicted']['peak_bytes'])}"


def main():
    binary = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "rocm-conformance-llm"
    output = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "generated" / "fit-table.md"
    names = [line.split()[0] for line in subprocess.run([str(binary), "--list-stress"], capture_output=True,
                                                         text=True, check=True).stdout.splitlines()
             if line and not line.startswith(" ")]
    compositions = [list(c) for k in range(1, len(names) + 1) for c in itertools.combinations(names, k)]
    jobs = [(modes, target) for modes in compositions for target in TARGETS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        docs = list(pool.map(lambda job: print_config(binary, job[1][1], job[0], job[1][2]), jobs))
    cells = {(",".join(m), t[0]): cell(d) for (m, t), d in zip(jobs, docs)}
    counts = {t[0]: sum(1 for (m, t2), d in zip(jobs, docs) if t2 == t and d["fit"] and not d["fit"]["fits"])
              for t in TARGETS}
    changed = {t[0]: sum(1 for (m, t2), d in zip(jobs, docs) if t2 == t and d["fit"] and d["fit"]["fits"]
                         and d["fit"]["changes"]) for t in TARGETS}
    skipped = sorted({f"{mode} ({why})" for d in docs for mode, why in d["stress_skipped"].items()})
    lines = [
        "# Predicted peak memory and the device fit of every stress composition",
        "",
        "Written by `scripts/fit_table.py` from the binary's own `--print-config` (its `sizing` and `fit`",
        "sections; formulas: [../sizing.md](../sizing.md)). `smoke` runs on the CPU, where no fit is made;",
        "`small` and `large` are fitted to GPUs posed with `--device-memory`: the fit may use 90% of the",
        "device, and a cell reads *peak as composed -> what the fit changed: peak after the fit* (whole",
        "blocks recomputed instead of keeping attention, a smaller micro-batch), or **refused** with the",
        "peak at micro-batch 1.",
        "",
        f"- modes this binary skips: {'; '.join(skipped) if skipped else 'none'}",
        "- refused: " + ", ".join(f"{t} {counts[t]}" for t, _, m in TARGETS if m),
        "- changed by the fit: " + ", ".join(f"{t} {changed[t]}" for t, _, m in TARGETS if m),
        "",
        "| modes | " + " | ".join(t[0] for t in TARGETS) + " |",
        "|---|" + "---|" * len(TARGETS),
    ]
    for modes in compositions:
        key = ",".join(modes)
        lines.append(f"| `{key}` | " + " | ".join(cells[(key, t[0])] for t in TARGETS) + " |")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n")
    print(f"wrote {output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}: {len(jobs)} compositions x targets")


if __name__ == "__main__":
    main()
