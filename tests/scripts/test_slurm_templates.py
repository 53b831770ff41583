#!/usr/bin/env python3
"""The Slurm templates the README gives cluster users, submitted to a real (throwaway, one-node)
Slurm started by scripts/slurm/local_cluster.sh: the node declares gpu:2 on placeholder files,
so the jobs run 2 ranks over Gloo on the CPU.

  one_node.sbatch --device cpu: the user's --device wins over the template's --device gpu, both
    ranks finish PASS, and RCCL is NOT_RUN (Gloo is not RCCL).
  one_node.sbatch --requeue with --resume auto: `scontrol requeue` after the first checkpoint;
    the second start resumes from the newest checkpoint, finishes every step, and the report's
    `restarts` section records the restart.

Skips (exit 77) where slurmctld is not installed or the test is not root.
usage: test_slurm_templates.py <rocm-conformance-llm binary>
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
RUN_FLAGS = ["--device", "cpu", "--stress", "comm", "--preset", "smoke", "--set", "num_threads=1"]


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def sbatch(args, tmp, wait):
    cmd = ["sbatch", "--parsable", f"--output={tmp}/%x-%j.out"] + (["--wait"] if wait else []) + args
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    job_id = done.stdout.strip().split(";")[0]
    return job_id, done.returncode, done.stderr


def job_field(job_id, field):
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    for item in out.split():
        if item.startswith(field + "="):
            return item.split("=", 1)[1]
    return ""


def wait_for(predicate, what, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    fail(f"timed out after {timeout_s} s waiting for {what}")


def job_log(tmp, job_id):
    return "".join(open(p).read() for p in glob.glob(f"{tmp}/*-{job_id}.out"))


def reports(run_dir):
    paths = [os.path.join(run_dir, "report.json"), os.path.join(run_dir, "report.rank1.json")]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        fail(f"missing {missing}; {run_dir} holds {sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else 'nothing'}")
    return [json.load(open(p)) for p in paths]


def check_two_rank_cpu_run(report, rank, steps):
    where = f"rank {rank}"
    if report["outcome"] != "completed" or report["exit_code"] != 0:
        fail(f"{where}: outcome {report['outcome']} exit {report['exit_code']}: {report.get('note')}")
    coverage = report["coverage"]
    if coverage["device"] != "cpu" or coverage["world_size"] != 2 or coverage["collective_backend"] != "gloo":
        fail(f"{where}: expected 2 ranks over gloo on the CPU, coverage says {coverage}")
    rccl = [c for c in report["components"] if c["component"] == "RCCL"]
    if not rccl or rccl[0]["exercised"] or "Gloo" not in rccl[0]["reason"]:
        fail(f"{where}: RCCL must not count as exercised (Gloo is not RCCL): {rccl}")
    if report["summary"]["last_step"] != steps:
        fail(f"{where}: last step {report['summary']['last_step']}, expected {steps}")


def check_pass(report, rank):
    rccl = [c for c in report["components"] if c["component"] == "RCCL"][0]
    if report["verdict"] != "PASS" or rccl["status"] != "NOT_RUN":
        fail(f"rank {rank}: verdict {report['verdict']}, RCCL {rccl['status']}, findings {report['findings']}")


def template_runs_two_cpu_ranks(tmp):
    steps = 20
    job_id, rc, err = sbatch(["--gpus-per-node=2", "scripts/slurm/one_node.sbatch"] + RUN_FLAGS +
                             ["--steps", str(steps)], tmp, wait=True)
    if rc != 0:
        fail(f"one_node.sbatch job {job_id} exited {rc}: {err}\n{job_log(tmp, job_id)}")
    for rank, report in enumerate(reports(f"{tmp}/runs/rcl-one-node-{job_id}")):
        check_two_rank_cpu_run(report, rank, steps)
        check_pass(report, rank)
    print(f"ok: one_node.sbatch --device cpu, job {job_id}: 2 ranks PASS over Gloo, RCCL NOT_RUN")


def requeued_job_resumes(tmp):
    steps, interval = 200, 10
    job_id, rc, err = sbatch(["--requeue", "--gpus-per-node=2", "scripts/slurm/one_node.sbatch"] + RUN_FLAGS +
                             ["--steps", str(steps), "--checkpoint-interval", str(interval), "--resume", "auto"],
                             tmp, wait=False)
    if rc != 0 or not job_id:
        fail(f"sbatch --requeue refused: {err}")
    run_dir = f"{tmp}/runs/rcl-one-node-{job_id}"
    checkpoints = lambda: glob.glob(f"{run_dir}/checkpoints/step-*/manifest.json")
    wait_for(lambda: checkpoints() or job_field(job_id, "JobState") not in ("PENDING", "RUNNING"),
             "the first checkpoint", 300)
    if job_field(job_id, "JobState") != "RUNNING":
        fail(f"job {job_id} left RUNNING ({job_field(job_id, 'JobState')}) before its first checkpoint\n{job_log(tmp, job_id)}")
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    wait_for(lambda: job_field(job_id, "JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"),
             "the requeued job to finish", 400)
    if job_field(job_id, "JobState") != "COMPLETED" or job_field(job_id, "Restarts") != "1":
        fail(f"job {job_id}: {job_field(job_id, 'JobState')} after {job_field(job_id, 'Restarts')} restarts\n{job_log(tmp, job_id)}")
    for rank, report in enumerate(reports(run_dir)):
        # The verdict is the first job's to prove; here a collective's timing on a busy host may warn.
        check_two_rank_cpu_run(report, rank, steps)
        restarts = report["restarts"]
        attempts = restarts["attempts"]
        if restarts["count"] != 1 or len(attempts) != 2 or attempts[0]["from_step"] != 0:
            fail(f"rank {rank}: expected a fresh start then one restart, restarts says {restarts}")
        resumed = attempts[1]["from_step"]
        # Slurm's SIGTERM on requeue makes the run checkpoint the step it stops at, so the newest
        # checkpoint need not be on the interval.
        if not (0 < resumed < steps) or checkpoint_step(attempts[1]["checkpoint"]) != resumed:
            fail(f"rank {rank}: the restart did not resume from a mid-run checkpoint: {attempts[1]}")
        if report["summary"]["first_step"] != resumed + 1:
            fail(f"rank {rank}: the second start trained from step {report['summary']['first_step']}, "
                 f"not the one after its checkpoint ({resumed})")
    print(f"ok: one_node.sbatch --requeue --resume auto, job {job_id}: requeued once, resumed from step "
          f"{resumed}, finished {steps} steps on both ranks")


def checkpoint_step(path):
    name = os.path.basename(path.rstrip("/"))  # step-00000011
    return int(name[len("step-"):]) if name.startswith("step-") else -1


def inside(binary):
    tmp = tempfile.mkdtemp(prefix="rcl-slurm-test.")
    os.environ.update(RCL_BINARY=binary, RCL_RUNS_DIR=f"{tmp}/runs")
    try:
        template_runs_two_cpu_ranks(tmp)
        requeued_job_resumes(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        inside(sys.argv[2])
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if shutil.which("slurmctld") is None or shutil.which("slurmd") is None:
        print("SKIP: slurmctld/slurmd not installed (scripts/setup.sh --with-tests installs slurm-wlm and munge)")
        sys.exit(SKIP)
    if os.geteuid() != 0:
        print("SKIP: a throwaway Slurm runs its slurmd as root; run this test as root")
        sys.exit(SKIP)
    cluster = os.path.join(REPO, "scripts", "slurm", "local_cluster.sh")
    rc = subprocess.run([cluster, sys.executable, os.path.abspath(__file__), "--inside",
                         os.path.abspath(sys.argv[1])], timeout=900).returncode
    sys.exit(rc)


if __name__ == "__main__":
    main()
