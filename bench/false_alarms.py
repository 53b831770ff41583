#!/usr/bin/env python3
"""False-alarm battery: clean runs of every stress mode through the binary, tallied per signature.

Every run is healthy (no --inject), so any warn or fail finding is a false alarm. Writes a
markdown table of the false-alarm rate per detector signature (target: 0) and per run kind.

  python3 bench/false_alarms.py --binary build/rocm-conformance-llm --seeds 20 --steps 300
"""
import argparse
import collections
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import time



def commit():
    """The checkout's commit and whether its tree had changes, for the table's header."""
    git = ["git", "-C", os.path.dirname(os.path.abspath(__file__))]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    return head or "unknown", " had uncommitted changes" if dirty.strip() else " was clean"


def stress_modes(binary):
    """The binary's registered stress modes (its --list-stress table), plus 'none' and 'all'."""
    table = subprocess.run([binary, "--list-stress", "--markdown"], check=True, capture_output=True, text=True).stdout
    modes = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    return ["none"] + modes + ["all"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(binary, mode, world, seed, steps, preset, out):
    """Runs one clean run on `world` local ranks; returns [(rank, exit code, findings)]."""
    args = [binary, "--preset", preset, "--device", "cpu", "--set", "num_threads=1",
            "--steps", str(steps), "--seed", str(seed), "--output-dir", out, "--overwrite"]
    if mode != "none":
        args += ["--stress", mode]
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        if world > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        log = open(os.path.join(out, f"rank{rank}.log"), "w")
        procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT))
    results = []
    for rank, proc in enumerate(procs):
        code = proc.wait()
        name = "report.json" if rank == 0 else f"report.rank{rank}.json"
        try:
            with open(os.path.join(out, name)) as f:
                findings = json.load(f)["findings"]
        except (OSError, ValueError, KeyError):
            findings = [{"signature": "no_report", "severity": "fail", "component": "-"}]
        results.append((rank, code, findings))
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/rocm-conformance-llm")
    p.add_argument("--preset", default="smoke")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", type=int, default=20, help="seeds per run kind (1..N)")
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--modes", default="", help="comma list (default: every mode the binary lists, and all); "
                   "'none' is a run without --stress")
    p.add_argument("--comm-worlds", default="2,4", help="rank counts of the extra --stress comm runs (empty: none)")
    p.add_argument("--jobs", type=int, default=1, help="single-rank runs side by side (multi-rank runs go one at a time)")
    p.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "false-alarms.md"))
    a = p.parse_args()

    modes = a.modes.split(",") if a.modes else stress_modes(a.binary)
    kinds = [(m, 1) for m in modes if m]
    kinds += [("comm", int(w)) for w in a.comm_worlds.split(",") if w]
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    fired = collections.defaultdict(lambda: collections.defaultdict(int))  # signature -> kind -> runs
    examples = {}
    alarmed_runs = collections.Counter()
    runs = collections.Counter()
    started = time.time()
    load_before = os.getloadavg()[0]
    def one(mode, world, seed):
        with tempfile.TemporaryDirectory(prefix="rcl-fa-") as out:
            return run_once(a.binary, mode, world, seed, a.steps, a.preset, out)

    for mode, world in kinds:
        kind = mode if world == 1 else f"{mode} x{world} ranks"
        with concurrent.futures.ThreadPoolExecutor(a.jobs if world == 1 else 1) as pool:
            futures = [(seed, pool.submit(one, mode, world, seed)) for seed in seeds]
            for seed, future in futures:
                runs[kind] += 1
                signatures = set()
                for rank, code, findings in future.result():
                    if code != 0:
                        signatures.add(f"exit_code_{code}")
                    for f in findings:
                        if f.get("severity") in ("warn", "fail"):
                            signatures.add(f["signature"])
                            examples.setdefault(f["signature"],
                                                f"{kind}, seed {seed}, rank {rank}: {f.get('message', '')}")
                for s in signatures:
                    fired[s][kind] += 1
                alarmed_runs[kind] += bool(signatures)
                print(f"{kind:16s} seed {seed:3d}: {', '.join(sorted(signatures)) or 'clean'}", flush=True)

    total = sum(runs.values())
    lines = ["# False alarms on clean runs", "",
             "Generated by `bench/false_alarms.py` (no faults injected: every warn or fail finding is a false",
             "alarm). Preset `{}`, {} steps, seeds {}..{}, CPU, one thread per rank, {} single-rank runs side by side;".format(
                 a.preset, a.steps, seeds.start, seeds.stop - 1, a.jobs),
             "Binary of commit {} (the working tree{}).".format(*commit()),
             "{} runs in {:.0f} s on a {}-core host, load average {:.1f} at the start and {:.1f} at the end".format(
                 total, time.time() - started, os.cpu_count(), load_before, os.getloadavg()[0]),
             "(other builds and tests shared the cores: the battery's size is what the time allowed).",
             "", "| run kind | runs | runs with a false alarm | rate |", "|---|---|---|---|"]
    for kind in runs:
        lines.append(f"| {kind} | {runs[kind]} | {alarmed_runs[kind]} | {alarmed_runs[kind] / runs[kind]:.1%} |")
    lines += ["", "Per signature (runs in which it fired, any rank):", ""]
    if not fired:
        lines.append("None: the false-alarm rate is 0 for every detector signature.")
    else:
        lines += ["| signature | runs | rate | example |", "|---|---|---|---|"]
        for s in sorted(fired):
            n = sum(fired[s].values())
            lines.append(f"| `{s}` | {n} | {n / total:.1%} | {examples.get(s, '')} |")
    with open(a.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
