#!/usr/bin/env python3
"""ocp.jsonl of real runs of the binary (argv[1]) keeps the OCP Test and Validation output
rules (ocp_rules.py): a clean CPU run (result NOT_APPLICABLE: it exercised no ROCm component;
the attention mode SKIP on libtorch 1.x; --ocp-stdout prints the same lines), a run with an
injected NaN (a FAIL diagnosis naming rocBLAS, result FAIL) and a crashed run (status ERROR, an
error naming the allocator's softwareInfo), and two ranks (each rank's file, with the
collectives' bus bandwidth). The checker itself fails on each rule broken on
purpose in a copy of a valid stream."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from ocp_rules import Violation, check_lines  # noqa: E402

binary = sys.argv[1]
SMOKE = ["--preset", "smoke", "--device", "cpu", "--set", "num_threads=1", "--set", "eval_interval=0"]


def run(tmp, name, args, expected_exit):
    out = pathlib.Path(tmp) / name
    r = subprocess.run([binary, *SMOKE, *args, "--output-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == expected_exit, f"{name}: exit {r.returncode}, wanted {expected_exit}\n{r.stderr[-3000:]}"
    lines = (out / "ocp.jsonl").read_text().splitlines()
    return lines, check_lines(lines), r.stdout, json.loads((out / "report.json").read_text())


def steps(artifacts):
    by_step = {}
    for a in artifacts:
        body = a.get("testStepArtifact")
        if body:
            by_step.setdefault(body["testStepId"], []).append(body)
    return by_step


def run_end(artifacts):
    return artifacts[-1]["testRunArtifact"]["testRunEnd"]


def of_kind(bodies, kind):
    return [b[kind] for b in bodies if kind in b]


def expect_violation(lines, what):
    try:
        check_lines(lines)
    except Violation:
        return
    raise AssertionError(f"the checker accepted a stream with {what}")


with tempfile.TemporaryDirectory() as tmp:
    # A clean CPU run: valid, every check a step, nothing exercised, so NOT_APPLICABLE.
    lines, artifacts, stdout, report = run(tmp, "clean", ["--steps", "5", "--stress", "attention,comm", "--ocp-stdout"], 0)
    assert stdout.splitlines() == lines, "--ocp-stdout differs from ocp.jsonl"
    assert run_end(artifacts) == {"status": "COMPLETE", "result": "NOT_APPLICABLE"}, run_end(artifacts)
    start = artifacts[1]["testRunArtifact"]["testRunStart"]
    names = {s["name"] for s in start["dutInfo"]["softwareInfos"]}
    for component in report["components"]:
        assert component["component"] in names, component["component"]
    by_step = steps(artifacts)
    for check in report["coverage"]["checks"]:
        bodies = by_step["step-check-" + check["check"]]
        status = of_kind(bodies, "testStepEnd")[0]["status"]
        assert status == ("COMPLETE" if check["ran"] else "SKIP"), (check, status)
        if check["ran"] and check["components"]:  # on the CPU: exercised nothing, says why
            assert {d["type"] for d in of_kind(bodies, "diagnosis")} == {"UNKNOWN"}, bodies
    attention_skipped = "attention" in report["config"]["stress_skipped"]
    assert of_kind(by_step["step-stress-attention"], "testStepEnd")[0]["status"] == ("SKIP" if attention_skipped else "COMPLETE")
    measured = {m["name"] for m in of_kind(by_step["step-training"], "measurement")}
    for name in ("steps", "tokens_per_second", "step_time_median", "step_time_p95"):
        assert name in measured, measured
    assert any(n.startswith("peak_memory_") for n in measured), measured

    # The checker fails on each rule broken in a copy of that valid stream.
    def mutated(index, change):
        copy = [json.loads(line) for line in lines]
        change(copy[index])
        return [json.dumps(a) for a in copy]

    expect_violation(lines[:-1], "no testRunEnd")
    expect_violation(lines[1:], "no schemaVersion first")
    expect_violation(lines[:3] + [lines[2]] + lines[3:], "a repeated sequence number")
    expect_violation(mutated(0, lambda a: a["schemaVersion"].update(major=1)), "schema version 1")
    expect_violation(mutated(1, lambda a: a["testRunArtifact"]["testRunStart"].update(tool="x")), "an unknown field")
    expect_violation(mutated(1, lambda a: a["testRunArtifact"]["testRunStart"].pop("version")), "no version")
    expect_violation(mutated(-1, lambda a: a["testRunArtifact"]["testRunEnd"].update(result="OK")), "a bad result")
    expect_violation(mutated(1, lambda a: a.update(timestamp="yesterday")), "a bad timestamp")
    measurement_at = next(i for i, a in enumerate(artifacts) if "measurement" in a.get("testStepArtifact", {}))
    expect_violation(mutated(measurement_at, lambda a: a["testStepArtifact"]["measurement"].update(hardwareInfoId="gpu9")),
                     "an undeclared hardwareInfoId")
    expect_violation(mutated(measurement_at, lambda a: a["testStepArtifact"].update(testStepId="nowhere")),
                     "an artifact of a step never started")
    end_at = next(i for i, a in enumerate(artifacts) if "testStepEnd" in a.get("testStepArtifact", {}))
    expect_violation(lines[:end_at + 1] + [lines[end_at]] + lines[end_at + 1:], "a step ended twice")

    # A NaN injected at step 3: a FAIL diagnosis in the numerics check's step, naming rocBLAS.
    _, artifacts, _, _ = run(tmp, "nan", ["--steps", "6", "--inject", "nan@step=3"], 1)
    assert run_end(artifacts) == {"status": "COMPLETE", "result": "FAIL"}, run_end(artifacts)
    diagnoses = of_kind(steps(artifacts)["step-check-numerics"], "diagnosis")
    failed = [d for d in diagnoses if d["type"] == "FAIL"]
    assert failed and failed[0]["verdict"] == "nonfinite_loss", diagnoses
    assert failed[0]["subcomponent"]["name"] == "rocBLAS/hipBLASLt", failed[0]

    # A crash (an allocation the host cannot give, on a CPU run): status ERROR, the host's
    # out-of-memory finding a FAIL diagnosis, and an error naming no ROCm software: the CPU's
    # memory is not the ROCr allocator's.
    _, artifacts, _, _ = run(tmp, "crash", ["--steps", "6", "--inject", "memory-leak=1000000GiB/step@step=3"], 3)
    assert run_end(artifacts) == {"status": "ERROR", "result": "FAIL"}, run_end(artifacts)
    training = steps(artifacts)["step-training"]
    assert of_kind(training, "testStepEnd")[0]["status"] == "ERROR"
    errors = of_kind(training, "error")
    software = {s["softwareInfoId"]: s["name"] for s in
                artifacts[1]["testRunArtifact"]["testRunStart"]["dutInfo"]["softwareInfos"]}
    assert errors and errors[0]["symptom"] == "crashed", training
    assert [software[i] for i in errors[0]["softwareInfoIds"]] == [], errors
    assert any(d["verdict"] == "host_out_of_memory" and d["type"] == "FAIL"
               for d in of_kind(training, "diagnosis")), training

    # Two ranks on loopback: each rank's file keeps the rules and measures the collectives' bus
    # bandwidth.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = pathlib.Path(tmp) / "two-ranks"
    ranks = [subprocess.Popen([binary, *SMOKE, "--steps", "4", "--output-dir", str(out)],
                              env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(2)]
    assert [p.wait(timeout=300) for p in ranks] == [0, 0]
    for name in ("ocp.jsonl", "ocp.rank1.jsonl"):
        artifacts = check_lines((out / name).read_text().splitlines())
        measured = {m["name"] for m in of_kind(steps(artifacts)["step-training"], "measurement")}
        assert any(n.startswith("collective_bus_bandwidth_") for n in measured), (name, measured)
        assert artifacts[1]["testRunArtifact"]["testRunStart"]["parameters"]["world_size"] == 2

print("ocp.jsonl keeps the OCP Test and Validation 2.0 rules in clean, failing and crashed runs")
