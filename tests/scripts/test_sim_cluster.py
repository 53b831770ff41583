#!/usr/bin/env python3
"""Runs across simulated nodes (scripts/cluster/sim_cluster.sh: network namespaces on a bridge,
each node with its own address, hostname and output directory), one case per call, through
scripts/torchrun.py (torchrun with its exit barrier bounded):

  two_by_two    2 nodes x 2 ranks: PASS without a warning, each node writing only its own ranks'
                files, the preflight's record naming each node's address.
  three_nodes   3 nodes x 1 rank, --stress comm with another seed: PASS.
  preflight     a rank on node 1 refused before anything is written (exit 2), with a
                configuration message naming the host and the fix: its own name missing from the
                hosts file, GLOO_SOCKET_IFNAME naming no interface, MASTER_ADDR not answering.
  slow_node     3 nodes x 2 ranks, node 1's ranks slowed by --inject slow-step: the job report's
                odd_node_slow names node 1 and its ranks, and no suspect.
  STRUCK cases  (below: a rank killed, a node killed, a link cut, a rank frozen in the data, forward,
                backward, gradient-sync and optimizer phases; on nodes other than rank 0's and on
                rank 0's own; 2, 4 and 8 ranks per node): node 0's job report names the struck node
                and only its lost world ranks, CRASHED (exit 3), on disk within collective_timeout_s
                + 30 s of the strike; every torchrun ends within a minute of it; every live node's
                console ends with the job's outcome naming that node.
  rank0_frozen  rank 0 frozen in the data phase (3 nodes x 2): rank 1, its node-mate, writes node
                0's job report naming node 0 and world rank 0; rank 0, resumed, rewrites it naming
                itself alone (paused_s), never the ranks it could no longer hear.
  rank0_frozen_alone  the same with one rank a node (4 x 1, frozen in the gradient sync): node 1's
                rank 1 writes the stand-in's report there.
  node0_killed  every process of node 0 killed (the store's server with them), one rank a node: node 1's
                own job report names node 0 and world rank 0, because node 0 refuses the connection to
                the store (reachable, its store gone).
  node0_link_cut node 0's link set down, one rank a node: node 0's job report names node 0 itself (its
                only interface has lost its link) and node 1's names no node, saying why (the store went
                silent: node 0 down or the path cut, which one side cannot tell).
Every case reads the job_report.json and job_ocp.jsonl (valid by ocp_rules.py) it expects: a clean
run names no suspect and no odd node; a lost rank's job report ends CRASHED (exit 3) naming that
node alone (a FAIL diagnosis for it and each lost rank, the run ERROR and FAIL).
  slurm         scripts/slurm/multi_node.sbatch through Slurm, one slurmd per node
                (scripts/slurm/local_cluster.sh inside the simulated cluster): 2 nodes x 2 ranks PASS.
  slurm_frozen  the same with world rank 3 frozen in the optimizer: the job report names node 1 and
                rank 3, and srun --kill-on-bad-exit ends the job within a minute of it.

Skips (exit 77) where the test is not root, network namespaces cannot be made, or torchrun (slurm-wlm and
munge for the Slurm cases) is missing.
usage: test_sim_cluster.py CASE <rocm-conformance-llm binary>
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ocp_rules import Violation, check_lines
from test_slurm_templates import fail, job_log, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "scripts", "cluster", "sim_cluster.sh")
TORCHRUN = os.path.join(REPO, "scripts", "torchrun.py")
EXIT_BARRIER_S = 20
SKIP = 77
PORT = 29500  # every cluster has its own network namespaces: no other run holds it there
TIMEOUT_S = 10  # collective_timeout_s of the fault cases: how long survivors wait for the lost rank
RUN = ["--device", "cpu", "--preset", "smoke", "--set", "num_threads=1", "--set", "eval_interval=0"]
# Nodes per case, and the hosts file entries left out.
CASES = {"two_by_two": (2, []), "three_nodes": (3, []), "preflight": (2, [1]), "slow_node": (3, []),
         "rank0_frozen": (3, []), "rank0_frozen_alone": (4, []), "node0_killed": (2, []), "node0_link_cut": (2, []),
         "slurm": (2, []), "slurm_frozen": (2, [])}


def node_env(k):
    return {name: os.environ[f"SIM_{name}_{k}"] for name in ("NS", "ADDR", "HOST", "IF")}


def torch_python():
    """The Python the torchrun on PATH runs (it has torch; the test's own may not)."""
    with open(shutil.which("torchrun")) as f:
        first = f.readline()
    return first[2:].split()[-1] if first.startswith("#!") else sys.executable


def torchrun(k, nnodes, nproc, out_dir, args, log):
    """torchrun on node k (torch 1.13 spellings; --redirects/--tee: see docs/distributed.md), through
    scripts/torchrun.py: its agents' exit barrier bounded (RCL_EXIT_BARRIER_S), so a failed job ends
    within a minute of its verdict instead of torch 1.13's 300 s."""
    cmd = os.environ["SIM_ON"].split() + [str(k), "env", f"RCL_EXIT_BARRIER_S={EXIT_BARRIER_S}", torch_python(),
                                          TORCHRUN, f"--nnodes={nnodes}", f"--nproc_per_node={nproc}",
                                          f"--node_rank={k}", f"--master_addr={os.environ['SIM_MASTER_ADDR']}",
                                          f"--master_port={PORT}", "--no_python", "--redirects=1", "--tee=1",
                                          f"--log_dir={out_dir}-torchrun", "--monitor_interval=0.2",
                                          os.environ["RCL_BINARY"]] + RUN + ["--output-dir", out_dir] + args
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def run_nodes(tmp, nnodes, nproc, args):
    """torchrun on every node, each into its own directory. Returns the exit codes, node 0's first."""
    dirs = [f"{tmp}/node{k}/run" for k in range(nnodes)]
    logs = [open(f"{tmp}/node{k}.log", "w") for k in range(nnodes)]
    procs = [torchrun(k, nnodes, nproc, dirs[k], args, logs[k]) for k in range(nnodes)]
    codes = []
    for k, p in enumerate(procs):
        try:
            codes.append(p.wait(timeout=180))
        except subprocess.TimeoutExpired:
            p.kill()
            fail(f"node {k}'s torchrun did not end\n{node_log(tmp, k)}")
    return dirs, codes


def node_log(tmp, k):
    return open(f"{tmp}/node{k}.log").read()[-4000:]


def last_step(run_dir):
    try:
        return json.load(open(f"{run_dir}/heartbeat.json")).get("last_completed_step") or 0
    except (OSError, ValueError):
        return 0


def report(run_dir, rank):
    path = f"{run_dir}/report.json" if rank == 0 else f"{run_dir}/report.rank{rank}.json"
    if not os.path.exists(path):
        fail(f"missing {path}; the directory holds {sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else 'nothing'}")
    return json.load(open(path))


def job_report(run_dir, nproc):
    """Node 0's job_report.json, its rows checked against the nodes' names."""
    path = f"{run_dir}/job_report.json"
    if not os.path.exists(path):
        fail(f"missing {path}; the directory holds {sorted(os.listdir(run_dir))}")
    job = json.load(open(path))
    hosts = [row["host"] for row in job["ranks"]]
    expected = [node_env(rank // nproc)["HOST"] for rank in range(len(hosts))]
    if hosts != expected or [row["world_rank"] for row in job["ranks"]] != list(range(len(hosts))):
        fail(f"job report rows name hosts {hosts}, expected {expected}")
    return job


def job_ocp(run_dir):
    """Node 0's job_ocp.jsonl, checked against the OCP output rules: its diagnoses (verdict, type,
    hardwareInfoId) and its testRunEnd (status, result)."""
    try:
        artifacts = check_lines(open(f"{run_dir}/job_ocp.jsonl").read().splitlines())
    except (OSError, Violation) as e:
        fail(f"job_ocp.jsonl: {e}")
    bodies = [a["testStepArtifact"] for a in artifacts if "testStepArtifact" in a]
    diagnoses = [(b["diagnosis"]["verdict"], b["diagnosis"]["type"], b["diagnosis"]["hardwareInfoId"])
                 for b in bodies if "diagnosis" in b]
    end = artifacts[-1]["testRunArtifact"]["testRunEnd"]
    return diagnoses, (end["status"], end["result"])


def suspects(job):
    return [(s["host"], s["world_ranks"]) for s in job["suspect_hosts"]]


def check_clean(tmp, nnodes, nproc, steps, args=()):
    dirs, codes = run_nodes(tmp, nnodes, nproc, ["--steps", str(steps)] + list(args))
    for k, code in enumerate(codes):
        if code != 0:
            fail(f"node {k}'s torchrun exited {code}\n{node_log(tmp, k)}")
    world = nnodes * nproc
    for k in range(nnodes):
        mine = set(range(k * nproc, (k + 1) * nproc))
        for rank in range(world):
            present = os.path.exists(f"{dirs[k]}/{'report.json' if rank == 0 else f'report.rank{rank}.json'}")
            if present != (rank in mine):
                fail(f"node {k}'s directory {'lacks' if rank in mine else 'holds'} rank {rank}'s report "
                     f"(node-local directories: each node writes its own ranks)")
        r = report(dirs[k], k * nproc)
        network = r["config"]["network"]
        if network["host"] != node_env(k)["HOST"] or network["gloo_address"] != node_env(k)["ADDR"]:
            fail(f"node {k}: the network record names {network}, not {node_env(k)}")
        if not network["spans_hosts"]:
            fail(f"node {k}: the preflight did not see a world across {nnodes} hosts: {network}")
    r0 = report(dirs[0], 0)
    if r0["verdict"] != "PASS" or r0["findings"] or r0["coverage"]["world_size"] != world:
        fail(f"rank 0: verdict {r0['verdict']}, world {r0['coverage']['world_size']}, findings {r0['findings']}")
    if r0["summary"]["last_step"] != steps:
        fail(f"rank 0 ended at step {r0['summary']['last_step']}, not {steps}")
    job = job_report(dirs[0], nproc)
    if job["verdict"] != "PASS" or job["exit_code"] != 0 or job["suspect_hosts"] or job["findings"] or \
            len(job["hosts"]) != nnodes or any(row["source"] != "report" for row in job["ranks"]):
        fail(f"clean run's job report: {json.dumps(job, indent=1)[:3000]}")
    diagnoses, end = job_ocp(dirs[0])
    if end != ("COMPLETE", "PASS") or any(d[1] != "PASS" for d in diagnoses) or len(diagnoses) != world + nnodes:
        fail(f"clean run's job_ocp.jsonl: {end}, diagnoses {diagnoses}")
    lines = outcome_lines(tmp, nnodes)
    if any(not line or "job verdict PASS (exit 0): no node to drain" not in line for line in lines):
        fail(f"clean run: the nodes' consoles end with {lines}")
    print(f"ok: {nnodes} nodes x {nproc} ranks over torchrun {' '.join(args)}: PASS without a finding, node-local files; "
          f"the job report names no suspect and no odd node")


def slow_node(tmp):
    """Node 1's ranks (of 3 nodes x 2) 0.25 s slower a step, 6 steps timed after diagnostics.warmup_steps."""
    args = ["--steps", "7", "--set", "diagnostics.warmup_steps=1",
            "--inject", "slow-step=0.25@rank=2,slow-step=0.25@rank=3"]
    dirs, codes = run_nodes(tmp, 3, 2, args)
    if codes != [0, 0, 0]:
        fail(f"torchrun exits {codes}\n{node_log(tmp, 0)}")
    job = job_report(dirs[0], 2)
    odd = [(f["signature"], f["severity"], f["evidence"]["host"], f["evidence"]["world_ranks"])
           for f in job["findings"]]
    if odd != [("odd_node_slow", "warn", node_env(1)["HOST"], [2, 3])] or job["suspect_hosts"] or \
            (job["verdict"], job["exit_code"]) != ("WARN", 0):
        fail(f"slowed node 1: job report {job['verdict']} (exit {job['exit_code']}), findings {odd}, "
             f"suspects {suspects(job)}")
    diagnoses, end = job_ocp(dirs[0])
    if end != ("COMPLETE", "PASS") or ("odd_node_slow", "UNKNOWN", "hw-rank-2") not in diagnoses:
        fail(f"slowed node 1's job_ocp.jsonl: {end}, diagnoses {diagnoses}")
    lines = outcome_lines(tmp, 3)
    if any(not line or "job verdict WARN (exit 0): no node to drain" not in line for line in lines):
        fail(f"slowed node 1: the consoles end with {lines}")
    print(f"ok: node 1 slowed: the job report's odd_node_slow names {odd[0][2]} ranks {odd[0][3]}, no suspect: "
          f"{job['findings'][0]['message']}")


def direct_rank(tmp, k, env, args=()):
    """World rank 2 of 4 on node k, started with torchrun's variables by hand: the refusal's exit
    code is the binary's own."""
    out_dir = f"{tmp}/direct{k}-{len(os.listdir(tmp))}"
    variables = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                 "MASTER_ADDR": os.environ["SIM_MASTER_ADDR"], "MASTER_PORT": str(PORT), **env}
    cmd = os.environ["SIM_ON"].split() + [str(k), "env"] + [f"{n}={v}" for n, v in variables.items()] + \
        [os.environ["RCL_BINARY"]] + RUN + ["--steps", "2", "--output-dir", out_dir] + list(args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if os.path.exists(out_dir):
        fail(f"a refused run wrote {out_dir}: {os.listdir(out_dir)}")
    return done.returncode, done.stdout + done.stderr


def check_refused(what, code, output, expected):
    if code != 2:
        fail(f"{what}: exit {code}, expected 2 (a configuration error)\n{output}")
    missing = [e for e in expected if e not in output]
    if missing or "RCCL" in output or "rendezvous_failed" in output:
        fail(f"{what}: the message lacks {missing} or blames RCCL:\n{output}")
    print(f"ok: {what}: exit 2, {[line for line in output.splitlines() if 'error' in line.lower()][-1:]}")


def preflight(tmp):
    host = node_env(1)["HOST"]
    code, out = direct_rank(tmp, 1, {})
    check_refused("own name not in the hosts file", code, out,
                  [f"host '{host}' does not resolve", "world spans hosts", "GLOO_SOCKET_IFNAME=eth0",
                   f"'{node_env(1)['ADDR']} {host}' to /etc/hosts"])
    code, out = direct_rank(tmp, 1, {"GLOO_SOCKET_IFNAME": "eth9"})
    check_refused("GLOO_SOCKET_IFNAME naming no interface", code, out,
                  [f"GLOO_SOCKET_IFNAME='eth9' on host '{host}': no such interface", "eth0"])
    # The interface named, nobody serving the rendezvous: the probe gives up after the timeout.
    code, out = direct_rank(tmp, 1, {"GLOO_SOCKET_IFNAME": "eth0"}, ["--set", "collective_timeout_s=2"])
    check_refused("MASTER_ADDR not answering", code, out,
                  [f"MASTER_ADDR={os.environ['SIM_MASTER_ADDR']} MASTER_PORT={PORT} did not answer host '{host}'"])


# A struck job: (nodes, ranks per node, extra flags, what strikes once rank 0 has published a step,
# the node whose ranks are lost and those world ranks). Frozen ranks stop themselves
# (--inject rank-stop, SIGSTOP: no EOF, only silence); killed ones get SIGKILL from outside.
# Spread over the loop's phases, over nodes other than rank 0's and rank 0's own, with 2, 4 and
# 8 ranks per node.
def inject(spec):
    return ["--inject", spec]


STRUCK = {
    "rank_killed": (2, 8, [], lambda: kill_rank(1, 3), 1, [11]),
    "rank_killed_on_node0": (3, 2, [], lambda: kill_rank(0, 1), 0, [1]),
    "node_killed": (3, 2, [], lambda: kill_node(2), 2, [4, 5]),
    "link_cut": (3, 2, [], lambda: cut_link(1), 1, [2, 3]),
    # --stress comm: tensor-parallel pairs (0,1), (2,3), (4,5), whose all-reduces run in the forward:
    # rank 0 waits on its data-parallel partner, itself waiting, so only the job report names rank 5.
    "frozen_forward": (3, 2, ["--stress", "comm"] + inject("rank-stop@phase=forward@rank=5@step=6"), None, 2, [5]),
    "frozen_backward_on_node0": (3, 2, inject("rank-stop@phase=backward@rank=1@step=6"), None, 0, [1]),
    "frozen_grad_sync": (2, 4, inject("rank-stop@phase=grad_sync@rank=6@step=6"), None, 1, [6]),
    "frozen_optimizer": (3, 2, inject("rank-stop@phase=optimizer@rank=3@step=6"), None, 1, [3]),
    "frozen_data": (3, 2, inject("rank-stop@phase=data@rank=4@step=6"), None, 2, [4]),
}
CASES.update({name: (spec[0], []) for name, spec in STRUCK.items()})
# The job report on disk within this of the strike (the survivors' collective timeout, then rank 0's
# gather), and the whole job ended within a minute of it (docs/distributed.md).
REPORT_BOUND_S = TIMEOUT_S + 30
END_BOUND_S = 60


def start_nodes(tmp, nnodes, nproc, args):
    dirs = [f"{tmp}/node{k}/run" for k in range(nnodes)]
    logs = [open(f"{tmp}/node{k}.log", "w") for k in range(nnodes)]
    run = ["--steps", "500", "--set", f"collective_timeout_s={TIMEOUT_S}"] + list(args)
    return dirs, [torchrun(k, nnodes, nproc, dirs[k], run, logs[k]) for k in range(nnodes)]


def wait_all(procs, tmp, bound_s, what):
    """Every torchrun ends within bound_s; returns when the last did."""
    deadline = time.monotonic() + bound_s
    for k, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail(f"node {k}'s torchrun still running {bound_s} s after {what}\n{node_log(tmp, k)}")
    return time.monotonic()


def outcome_lines(tmp, nnodes):
    """Each node's console's line of the job's outcome (the program's last word there)."""
    lines = []
    for k in range(nnodes):
        mine = [line for line in open(f"{tmp}/node{k}.log").read().splitlines() if "job verdict " in line]
        lines.append(mine[-1] if mine else None)
    return lines


def struck_job(tmp, case):
    """The job struck as STRUCK[case] says: node 0's job report names the lost node and only its lost
    ranks, on disk within REPORT_BOUND_S of the strike, CRASHED (exit 3); every torchrun ends within
    END_BOUND_S of the report; every live node's console ends with the job's outcome naming that node."""
    nnodes, nproc, args, strike, lost_node, lost = STRUCK[case]
    dirs, procs = start_nodes(tmp, nnodes, nproc, args)
    reported = lambda: os.path.exists(f"{dirs[0]}/job_report.html")
    if strike:
        wait_for(lambda: last_step(dirs[0]) >= 2 or reported(), "rank 0's second step", 180)
        struck_at = time.monotonic()
        strike()
    else:  # the run's own rank-stop: from the moment the lost rank's process is stopped
        struck_at = wait_frozen(lost_node, lost[0] % nproc)
    wait_for(reported, "node 0's job report", REPORT_BOUND_S)
    reported_at = time.monotonic()
    ended_at = wait_all(procs, tmp, END_BOUND_S, "the job report")
    job = job_report(dirs[0], nproc)
    lost_host = node_env(lost_node)["HOST"]
    lost_rows = [row["world_rank"] for row in job["ranks"] if row["source"] != "report"]
    if (job["verdict"], job["exit_code"]) != ("CRASHED", 3) or suspects(job) != [(lost_host, lost)] or \
            lost_rows != lost:
        fail(f"{case}: job report {job['verdict']} (exit {job['exit_code']}) by rank {job['written_by']}, suspects "
             f"{suspects(job)}, rows without a verdict {lost_rows}; expected CRASHED (exit 3), [({lost_host!r}, "
             f"{lost})]:\n{json.dumps(job['suspect_hosts'], indent=1)}\n{node_log(tmp, 0)}")
    diagnoses, end = job_ocp(dirs[0])
    failed = sorted(d for d in diagnoses if d[1] == "FAIL")
    host_id = f"hw-rank-{lost_node * nproc}"  # a host's diagnosis names its first rank's hardware
    if end != ("ERROR", "FAIL") or ("suspect-node", "FAIL", host_id) not in failed or \
            any(d[0] == "suspect-node" and d[2] != host_id for d in failed) or \
            any(("rank-LOST", "FAIL", f"hw-rank-{r}") not in failed for r in lost):
        fail(f"{case}: job_ocp.jsonl {end}, FAIL diagnoses {failed}")
    # The consoles of every node with a live rank that still reaches the store (a cut node's ranks
    # each write their own view, docs/outputs.md).
    live = [k for k in range(nnodes) if k != lost_node or (len(lost) < nproc and case != "link_cut")]
    lines = outcome_lines(tmp, nnodes)
    for k in live:
        if not lines[k] or f"drain {lost_host} (world ranks {','.join(map(str, lost))})" not in lines[k]:
            fail(f"{case}: node {k}'s console does not end with the job's outcome naming {lost_host}: {lines[k]}\n"
                 f"{node_log(tmp, k)}")
    print(f"ok: {case} ({nnodes} nodes x {nproc} ranks): job report CRASHED naming {suspects(job)} "
          f"{reported_at - struck_at:.0f} s after the strike (bound {REPORT_BOUND_S}), every torchrun ended "
          f"{ended_at - reported_at:.0f} s after it (bound {END_BOUND_S}): {job['suspect_hosts'][0]['evidence'][0]}")
    print(f"ok: node 0's console ends: {lines[0].split('] ', 1)[-1]}")


def strike_rank0(tmp, nproc, args, act, writers):
    """2 nodes; `act` strikes rank 0's side once it has published a step. Waits for the job
    report of every node in `writers` (job_report.html, the last file of it), then stops every torchrun."""
    dirs = [f"{tmp}/node{k}/run" for k in range(2)]
    logs = [open(f"{tmp}/node{k}.log", "w") for k in range(2)]
    run = ["--steps", "500", "--set", f"collective_timeout_s={TIMEOUT_S}"] + args
    procs = [torchrun(k, 2, nproc, dirs[k], run, logs[k]) for k in range(2)]
    # (A fault of rank 0's own may strike before its heartbeat file shows a second step.)
    reported = lambda: all(os.path.exists(f"{dirs[k]}/job_report.html") for k in writers)
    wait_for(lambda: last_step(dirs[0]) >= 2 or reported(), "rank 0's second step", 120)
    act()
    # A survivor ends after its collective timeout, waits the gather's limit for rank 0's row, then writes.
    wait_for(reported, f"the job reports of nodes {writers}", 4 * TIMEOUT_S + 30)
    for p in procs:
        p.kill()
        p.wait(timeout=15)
    return dirs


def expect_job(job, written_by, named, what, tmp):
    """A survivor's job report: CRASHED (exit 3), written by `written_by`, naming exactly `named`
    ([(host, world ranks)]); its job_ocp.jsonl valid."""
    if (job["verdict"], job["exit_code"], job["written_by"]) != ("CRASHED", 3, written_by) or suspects(job) != named:
        fail(f"{what}: job report {job['verdict']} (exit {job['exit_code']}) by rank {job['written_by']}, suspects "
             f"{suspects(job)}; expected CRASHED (exit 3) by rank {written_by}, {named}:\n"
             f"{json.dumps({k: job[k] for k in ('basis', 'unresolved', 'cut_links', 'suspect_hosts')}, indent=1)}\n"
             f"{node_log(tmp, 0)}\n{node_log(tmp, 1)}")
    print(f"ok: {what}: written by rank {written_by} ({job['basis']}), suspects {named}: "
          f"{(job['suspect_hosts'] or [{'evidence': [job['unresolved']]}])[0]['evidence'][0]}")


def rank0_frozen(tmp, nnodes, nproc, phase):
    """Rank 0 frozen in `phase` (torchrun's agent on node 0 still serves the store): the first survivor
    on node 0 (else the lowest, node 1's) writes a job report naming node 0 and world rank 0 alone;
    rank 0, resumed (SIGCONT) once that report exists, writes node 0's own job report naming itself
    alone (its process did not run for longer than the collective timeout), never the ranks it could
    no longer hear."""
    dirs, procs = start_nodes(tmp, nnodes, nproc, inject(f"rank-stop@phase={phase}@rank=0@step=6"))
    stand_in_node = 0 if nproc > 1 else 1
    stand_in = 1
    reported = lambda: os.path.exists(f"{dirs[stand_in_node]}/job_report.html")
    struck_at = wait_frozen(0, 0)
    wait_for(reported, f"the job report of node {stand_in_node}", REPORT_BOUND_S + TIMEOUT_S)
    reported_at = time.monotonic()
    job = job_report(dirs[stand_in_node], nproc)
    if job["ranks"][0]["source"] != "heartbeat" or any(r["source"] != "report" for r in job["ranks"][1:]):
        fail(f"rank 0 frozen: rows' sources {[r['source'] for r in job['ranks']]}")
    expect_job(job, stand_in, [(node_env(0)["HOST"], [0])], f"rank 0 frozen in the {phase}", tmp)
    if nproc > 1:
        os.remove(f"{dirs[0]}/job_report.html")  # rank 0's own, once resumed, replaces it
    # Resumed: its collective fails at once (the peers are gone); its own job report follows.
    subprocess.run(["kill", "-CONT", rank_pid(0, 0)])
    resumed_by = time.monotonic() + REPORT_BOUND_S
    while not os.path.exists(f"{dirs[0]}/job_report.html"):
        if time.monotonic() > resumed_by:
            fail(f"no job report of rank 0's own {REPORT_BOUND_S} s after it resumed\n{node_log(tmp, 0)}")
        time.sleep(0.2)
    mine = job_report(dirs[0], nproc)
    expect_job(mine, 0, [(node_env(0)["HOST"], [0])], f"rank 0 frozen in the {phase}, resumed", tmp)
    if not mine["paused_s"] or mine["paused_s"] < TIMEOUT_S:
        fail(f"rank 0's own job report: paused_s {mine['paused_s']}, expected at least {TIMEOUT_S}")
    ended_at = wait_all(procs, tmp, END_BOUND_S, "rank 0's own job report")
    print(f"ok: rank 0 frozen: the stand-in's report {reported_at - struck_at:.0f} s after the freeze, "
          f"every torchrun ended {ended_at - reported_at:.0f} s after it (rank 0 resumed between)")


def rank_pid(k, local_rank):
    """Node k's rank process of that local rank (torchrun sets LOCAL_RANK in each worker's environment)."""
    for pid in node_pids(k, "rocm-conformance"):
        try:
            if f"LOCAL_RANK={local_rank}" in open(f"/proc/{pid}/environ").read().split("\0"):
                return pid
        except OSError:
            continue
    return None


def wait_frozen(k, local_rank):
    """When node k's rank of that local rank stopped itself (rank-stop: SIGSTOP, state T)."""
    def stopped():
        pid = rank_pid(k, local_rank)
        try:
            return pid and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False
    wait_for(stopped, f"node {k}'s local rank {local_rank} to stop itself", 180)
    return time.monotonic()


def node_pids(k, name):
    pids = subprocess.run(["ip", "netns", "pids", node_env(k)["NS"]], capture_output=True, text=True).stdout.split()
    found = []
    for pid in pids:
        try:
            if name in open(f"/proc/{pid}/cmdline").read():
                found.append(pid)
        except OSError:
            pass
    return found


def node0_killed(tmp):
    dirs = strike_rank0(tmp, 1, [], lambda: kill_node(0), [1])
    job = job_report(dirs[1], 1)
    if [r["source"] for r in job["ranks"]] != ["none", "report"]:
        fail(f"node 0 killed: rows' sources {[r['source'] for r in job['ranks']]}")
    expect_job(job, 1, [(node_env(0)["HOST"], [0])], "node 0 killed, seen from node 1", tmp)
    job_ocp(dirs[1])


def node0_link_cut(tmp):
    dirs = strike_rank0(tmp, 1, [], lambda: subprocess.run(["ip", "link", "set", node_env(0)["IF"], "down"],
                                                            check=True), [0, 1])
    mine = job_report(dirs[0], 1)
    expect_job(mine, 0, [(node_env(0)["HOST"], [0])], "node 0's link cut, seen from node 0", tmp)
    if mine["cut_links"] != ["eth0"]:
        fail(f"node 0's job report: cut_links {mine['cut_links']}")
    theirs = job_report(dirs[1], 1)
    expect_job(theirs, 1, [], "node 0's link cut, seen from node 1", tmp)
    if not theirs["unresolved"] or [r["source"] for r in theirs["ranks"]] != ["unknown", "report"]:
        fail(f"node 1's view: unresolved {theirs['unresolved']!r}, sources {[r['source'] for r in theirs['ranks']]}")
    diagnoses, _ = job_ocp(dirs[1])
    if ("node-unheard", "UNKNOWN", "hw-rank-0") not in diagnoses:
        fail(f"node 1's job_ocp.jsonl: node 0 not left unknown: {diagnoses}")


def kill_node(k):
    for pid in subprocess.run(["ip", "netns", "pids", node_env(k)["NS"]], capture_output=True,
                              text=True).stdout.split():
        subprocess.run(["kill", "-9", pid])


def kill_rank(k, local_rank):
    pid = rank_pid(k, local_rank)
    if not pid:
        fail(f"no rank of local rank {local_rank} on node {k}")
    subprocess.run(["kill", "-9", pid])


def cut_link(k):
    subprocess.run(["ip", "link", "set", node_env(k)["IF"], "down"], check=True)


def slurm(tmp):
    steps = 6
    os.environ["RCL_RUNS_DIR"] = f"{tmp}/runs"  # every node sees it, as the template asks
    cmd = ["sbatch", "--parsable", "--wait", f"--output={tmp}/%x-%j.out", "--nodes=2", "--gpus-per-node=2",
           "scripts/slurm/multi_node.sbatch", "--stress", "comm", "--steps", str(steps)] + RUN
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    job_id = done.stdout.strip().split(";")[0]
    log = job_log(tmp, job_id)
    if done.returncode != 0:
        fail(f"multi_node.sbatch job {job_id} exited {done.returncode}: {done.stderr}\n{log}")
    run_dir = f"{tmp}/runs/rcl-multi-node-{job_id}"
    # --exclusive: each node's every GPU (local_cluster.sh declares 2), one rank each.
    for rank in range(4):
        r = report(run_dir, rank)
        if r["outcome"] != "completed" or r["summary"]["last_step"] != steps or r["coverage"]["world_size"] != 4:
            fail(f"rank {rank}: {r['outcome']} at step {r['summary']['last_step']}, world {r['coverage']['world_size']}")
        network = r["config"]["network"]
        if network["host"] != node_env(rank // 2)["HOST"] or not str(network["spans_hosts"]).startswith("SLURM_"):
            fail(f"rank {rank} ran on {network['host']}, not {node_env(rank // 2)['HOST']}, or the world's nodes went "
                 f"unseen: {network}")
    r0 = report(run_dir, 0)
    if r0["verdict"] != "PASS":
        fail(f"rank 0: verdict {r0['verdict']}, findings {r0['findings']}\n{log}")
    print(f"ok: multi_node.sbatch, job {job_id}: 2 nodes x 2 ranks through Slurm, PASS")


def slurm_frozen(tmp):
    """multi_node.sbatch (2 nodes x 2 ranks), world rank 3 frozen in the optimizer step: the job report
    in the shared runs directory names node 1 and rank 3 alone, and srun --kill-on-bad-exit (the
    template's) ends the step once the survivors exit after it, within END_BOUND_S."""
    os.environ["RCL_RUNS_DIR"] = f"{tmp}/runs"
    cmd = ["sbatch", "--parsable", "--wait", f"--output={tmp}/%x-%j.out", "--nodes=2", "--gpus-per-node=2",
           "scripts/slurm/multi_node.sbatch", "--steps", "500", "--set", f"collective_timeout_s={TIMEOUT_S}",
           "--inject", "rank-stop@phase=optimizer@rank=3@step=6"] + RUN
    submitted = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not glob.glob(f"{tmp}/runs/rcl-multi-node-*/job_report.html"):
        if time.monotonic() > deadline or submitted.poll() is not None:
            fail(f"no job report (sbatch exit {submitted.poll()})\n{slurm_logs(tmp)}")
        time.sleep(0.2)
    reported_at = time.monotonic()
    try:
        out, err = submitted.communicate(timeout=END_BOUND_S)
    except subprocess.TimeoutExpired:
        submitted.kill()
        fail(f"the Slurm job still running {END_BOUND_S} s after its job report\n{slurm_logs(tmp)}")
    run_dir = os.path.dirname(glob.glob(f"{tmp}/runs/rcl-multi-node-*/job_report.html")[0])
    job = job_report(run_dir, 2)
    if (job["verdict"], job["exit_code"]) != ("CRASHED", 3) or suspects(job) != [(node_env(1)["HOST"], [3])]:
        fail(f"Slurm, rank 3 frozen: job report {job['verdict']} (exit {job['exit_code']}), suspects {suspects(job)}"
             f"\n{slurm_logs(tmp)}")
    print(f"ok: Slurm, rank 3 frozen: the job report names {suspects(job)}; the job ended "
          f"{time.monotonic() - reported_at:.0f} s after it (sbatch exit {submitted.returncode})")


def slurm_logs(tmp):
    return "".join(open(p).read()[-3000:] for p in glob.glob(f"{tmp}/*.out"))


def inside(case, tmp):
    if case == "two_by_two":
        check_clean(tmp, 2, 2, 4)
    elif case == "three_nodes":
        check_clean(tmp, 3, 1, 3, ["--stress", "comm", "--seed", "7"])  # another seed, every collective kind
    elif case == "preflight":
        preflight(tmp)
    elif case == "slow_node":
        slow_node(tmp)
    elif case in STRUCK:
        struck_job(tmp, case)
    elif case == "rank0_frozen":
        rank0_frozen(tmp, 3, 2, "data")
    elif case == "rank0_frozen_alone":
        rank0_frozen(tmp, 4, 1, "grad_sync")
    elif case == "node0_killed":
        node0_killed(tmp)
    elif case == "node0_link_cut":
        node0_link_cut(tmp)
    elif case == "slurm":
        slurm(tmp)
    elif case == "slurm_frozen":
        slurm_frozen(tmp)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        tmp = tempfile.mkdtemp(prefix="rcl-sim-cluster.")
        try:
            inside(sys.argv[2], tmp)
        finally:
            if os.environ.get("RCL_SIM_KEEP"):  # for a look at the nodes' logs and directories
                print(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        return
    if len(sys.argv) != 3 or sys.argv[1] not in CASES:
        sys.exit(__doc__)
    if os.geteuid() != 0:
        print("SKIP: network namespaces need root")
        sys.exit(SKIP)
    if shutil.which("torchrun") is None or shutil.which("ip") is None or shutil.which("unshare") is None:
        print("SKIP: needs torchrun, ip (iproute2) and unshare (util-linux): scripts/setup.sh --with-tests")
        sys.exit(SKIP)
    probe = f"rclprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        print("SKIP: this machine cannot make network namespaces (ip netns add failed)")
        sys.exit(SKIP)
    subprocess.run(["ip", "netns", "del", probe])
    case = sys.argv[1]
    if case.startswith("slurm") and (shutil.which("slurmctld") is None or shutil.which("munged") is None):
        print("SKIP: slurmctld/munged not installed (scripts/setup.sh --with-tests installs slurm-wlm and munge)")
        sys.exit(SKIP)
    nodes, unlisted = CASES[case]
    os.environ["RCL_BINARY"] = os.path.abspath(sys.argv[2])
    cmd = [SIM, "--nodes", str(nodes), "--timeout", "400"] + [a for k in unlisted for a in ("--unlisted", str(k))]
    # The Slurm case runs on node 0 of a Slurm made of the simulated nodes.
    slurm_cluster = [os.path.join(REPO, "scripts", "slurm", "local_cluster.sh")] if case.startswith("slurm") else []
    inner = [sys.executable, os.path.abspath(__file__), "--inside", case]
    sys.exit(subprocess.run(cmd + ["--"] + slurm_cluster + inner).returncode)


if __name__ == "__main__":
    main()
