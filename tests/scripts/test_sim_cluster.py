#!/usr/bin/env python3
"""Runs across simulated nodes (scripts/cluster/sim_cluster.sh: network namespaces on a bridge,
each node with its own address, hostname and output directory), one case per call:

  two_by_two    torchrun --nnodes 2 --nproc_per_node 2: PASS without a warning, each node writing
                only its own ranks' files, the preflight's record naming each node's address.
  three_nodes   torchrun --nnodes 3, one rank each, --stress comm with another seed: PASS.
  preflight     a rank on node 1 refused before anything is written (exit 2), with a
                configuration message naming the host and the fix: its own name missing from the
                hosts file, GLOO_SOCKET_IFNAME naming no interface, MASTER_ADDR not answering.
  slow_node     2 nodes x 2 ranks, node 1's ranks slowed by --inject slow-step: the job report's
                odd_node_slow names node 1 and its ranks, and no suspect.
  rank_stopped  --stress comm, rank 3 (node 1) stopped by --inject rank-stop in the forward, inside its
                tensor-parallel pair (2, 3): rank 0 fails RCCL, the job report names world rank 3.
  rank_stopped_optimizer  rank 2 (node 1) stopped in the optimizer step, outside any collective: the same,
                naming world rank 2.
  node_killed   every process of node 1 killed mid-run: rank 0 fails RCCL, naming rank 1 (or, struck
                inside a collective, saying every rank entered it).
  link_cut      node 1's link set down mid-run: the same.
  rank0_stopped rank 0 stopped by --inject rank-stop in the backward: torchrun's agent on node 0 still
                serves the store, so rank 1, the lowest survivor, gathers every row and writes node 0's
                job report, naming node 0 and world rank 0.
  node0_killed  every process of node 0 killed (the store's server with them), one rank a node: node 1's
                own job report names node 0 and world rank 0, because node 0 refuses the connection to
                the store (reachable, its store gone).
  node0_link_cut node 0's link set down, one rank a node: node 0's job report names node 0 itself (its
                only interface has lost its link) and node 1's names no node, saying why (the store went
                silent: node 0 down or the path cut, which one side cannot tell).
Every case reads node 0's job_report.json and job_ocp.jsonl (valid by ocp_rules.py) too: a clean run
names no suspect and no odd node; a lost rank's job report ends CRASHED (exit 3) naming node 1, and
only node 1, with the lost world rank (a FAIL diagnosis for each, the run ERROR and FAIL).
  slurm         scripts/slurm/multi_node.sbatch through Slurm, one slurmd per node
                (scripts/slurm/local_cluster.sh inside the simulated cluster): 2 nodes x 2 ranks PASS.

Skips (exit 77) where the test is not root, network namespaces cannot be made, or torchrun (slurm-wlm and
munge for the slurm case) is missing.
usage: test_sim_cluster.py CASE <rocm-conformance-llm binary>
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from ocp_rules import Violation, check_lines
from test_slurm_templates import fail, job_log, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "scripts", "cluster", "sim_cluster.sh")
SKIP = 77
PORT = 29500  # every cluster has its own network namespaces: no other run holds it there
TIMEOUT_S = 10  # collective_timeout_s of the fault cases: how long survivors wait for the lost rank
RUN = ["--device", "cpu", "--preset", "smoke", "--set", "num_threads=1", "--set", "eval_interval=0"]
# Nodes per case, and the hosts file entries left out.
CASES = {"two_by_two": (2, []), "three_nodes": (3, []), "preflight": (2, [1]), "slow_node": (2, []),
         "rank_stopped": (2, []), "rank_stopped_optimizer": (2, []), "node_killed": (2, []), "link_cut": (2, []),
         "rank0_stopped": (2, []), "node0_killed": (2, []), "node0_link_cut": (2, []), "slurm": (2, [])}


def node_env(k):
    return {name: os.environ[f"SIM_{name}_{k}"] for name in ("NS", "ADDR", "HOST", "IF")}


def torchrun(k, nnodes, nproc, out_dir, args, log):
    """torchrun on node k (torch 1.13 spellings; --redirects/--tee: see docs/distributed.md)."""
    cmd = os.environ["SIM_ON"].split() + [str(k), "torchrun", f"--nnodes={nnodes}", f"--nproc_per_node={nproc}",
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
    print(f"ok: {nnodes} nodes x {nproc} ranks over torchrun {' '.join(args)}: PASS without a finding, node-local files; "
          f"the job report names no suspect and no odd node")


def slow_node(tmp):
    """Node 1's ranks 0.25 s slower a step, 6 steps timed after diagnostics.warmup_steps."""
    args = ["--steps", "7", "--set", "diagnostics.warmup_steps=1",
            "--inject", "slow-step=0.25@rank=2,slow-step=0.25@rank=3"]
    dirs, codes = run_nodes(tmp, 2, 2, args)
    if codes != [0, 0]:
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


def lost_rank(tmp, nproc, args, act, lost, mid_collective=False, subgroup=False):
    """2 nodes; `act` strikes node 1 once rank 0 has published a step. `mid_collective`: the strike
    may find node 1 inside a collective, which then fails with every rank in it: rank 0 says the
    transport stalled (collective_timeout) or its peer reset (collective_error), naming no rank. Rank 0's report once it ends
    (its junit.xml is the last file of its own; job_report.html the last of the job's); torchrun on node 0 then waits for its lost peer
    agent (torch 1.13's exit barrier, 300 s), so the cluster's teardown stops it. `subgroup`: the rank
    is lost inside a tensor-parallel group rank 0 is not in; rank 0 then waits on its data-parallel
    partner, itself waiting, so only the job report must name the lost rank."""
    run_dir = f"{tmp}/node0/run"
    logs = [open(f"{tmp}/node{k}.log", "w") for k in range(2)]
    run = ["--steps", "500", "--set", f"collective_timeout_s={TIMEOUT_S}"] + args
    procs = [torchrun(k, 2, nproc, f"{tmp}/node{k}/run", run, logs[k]) for k in range(2)]
    wait_for(lambda: last_step(run_dir) >= 2 or os.path.exists(f"{run_dir}/junit.xml"), "rank 0's second step", 120)
    act()
    wait_for(lambda: os.path.exists(f"{run_dir}/junit.xml"), "rank 0's end", 3 * TIMEOUT_S + 30)
    # Then the job report: the gather waits for the lost rank's row at most the collective timeout.
    wait_for(lambda: os.path.exists(f"{run_dir}/job_report.html"), "rank 0's job report", TIMEOUT_S + 15)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
    r0 = report(run_dir, 0)
    failed = [f for f in r0["findings"] if f["severity"] == "fail"]
    missing = lambda f: (f.get("evidence") or {}).get("missing_ranks", [])
    named = [f for f in failed if missing(f) == [lost]]
    if mid_collective:
        named += [f for f in failed if f["component"] == "RCCL" and not missing(f) and
                  f["signature"] in ("collective_timeout", "collective_error") and "every rank entered it" in f["message"]]
    if subgroup:
        named = [f for f in failed if f["component"] == "RCCL"]
    if r0["exit_code"] != 3 or not named:
        fail(f"rank 0: exit {r0['exit_code']} outcome {r0['outcome']}, no fail finding naming rank {lost}: "
             f"{json.dumps(r0['findings'], indent=1)[:3000]}\n{node_log(tmp, 0)}")
    f = named[0]
    print(f"ok: rank 0 {r0['outcome']} (exit {r0['exit_code']}): [{f['component']}] {f['signature']}, "
          f"missing_ranks {missing(f)}: {f['message'][:300]}")
    # The job report names node 1 alone, by the lost rank, whatever rank 0's own finding could tell.
    job = job_report(run_dir, nproc)
    lost_rows = [row["world_rank"] for row in job["ranks"] if row["source"] != "report"]
    if (job["verdict"], job["exit_code"]) != ("CRASHED", 3) or suspects(job) != [(node_env(1)["HOST"], [lost])] or \
            lost_rows != [lost]:
        fail(f"job report: {job['verdict']} (exit {job['exit_code']}), suspects {suspects(job)}, rows without a "
             f"verdict {lost_rows}; expected CRASHED (exit 3), [{node_env(1)['HOST']!r}, [{lost}]]:\n"
             f"{json.dumps(job['suspect_hosts'], indent=1)}\n{node_log(tmp, 0)}")
    diagnoses, end = job_ocp(run_dir)
    failed = sorted(d for d in diagnoses if d[1] == "FAIL")
    first_of_node1 = nproc  # node 1's host diagnosis names its first rank's hardware
    if end != ("ERROR", "FAIL") or ("suspect-node", "FAIL", f"hw-rank-{first_of_node1}") not in failed or \
            ("rank-LOST", "FAIL", f"hw-rank-{lost}") not in failed or \
            any(d[0] == "suspect-node" and d[2] != f"hw-rank-{first_of_node1}" for d in failed):
        fail(f"job_ocp.jsonl: {end}, FAIL diagnoses {failed}")
    print(f"ok: job report CRASHED (exit 3), suspect {suspects(job)}: {job['suspect_hosts'][0]['evidence'][0]}; "
          f"job_ocp.jsonl {end}")


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


def rank0_stopped(tmp):
    dirs = strike_rank0(tmp, 2, ["--inject", "rank-stop@phase=backward@rank=0@step=3"], lambda: None, [0])
    job = job_report(dirs[0], 2)
    rank0 = job["ranks"][0]
    if rank0["source"] != "heartbeat" or [r["source"] for r in job["ranks"][1:]] != ["report"] * 3:
        fail(f"rank 0 stopped: rows' sources {[r['source'] for r in job['ranks']]}")
    expect_job(job, 1, [(node_env(0)["HOST"], [0])], "rank 0 stopped in the backward", tmp)
    job_ocp(dirs[0])


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
    pids = subprocess.run(["ip", "netns", "pids", node_env(k)["NS"]], capture_output=True, text=True).stdout.split()
    for pid in pids:
        subprocess.run(["kill", "-9", pid])


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


def inside(case, tmp):
    if case == "two_by_two":
        check_clean(tmp, 2, 2, 4)
    elif case == "three_nodes":
        check_clean(tmp, 3, 1, 3, ["--stress", "comm", "--seed", "7"])  # another seed, every collective kind
    elif case == "preflight":
        preflight(tmp)
    elif case == "rank_stopped":
        # --stress comm: tensor-parallel pairs (world ranks 0,1 and 2,3), whose all-reduces run in the forward.
        lost_rank(tmp, 2, ["--stress", "comm", "--inject", "rank-stop@phase=forward@rank=3@step=3"], lambda: None, 3,
                  subgroup=True)
    elif case == "rank_stopped_optimizer":
        lost_rank(tmp, 2, ["--inject", "rank-stop@phase=optimizer@rank=2@step=3"], lambda: None, 2)
    elif case == "slow_node":
        slow_node(tmp)
    elif case == "node_killed":
        lost_rank(tmp, 1, [], lambda: kill_node(1), 1, mid_collective=True)
    elif case == "link_cut":
        lost_rank(tmp, 1, [], lambda: subprocess.run(["ip", "link", "set", node_env(1)["IF"], "down"], check=True), 1,
                  mid_collective=True)
    elif case == "rank0_stopped":
        rank0_stopped(tmp)
    elif case == "node0_killed":
        node0_killed(tmp)
    elif case == "node0_link_cut":
        node0_link_cut(tmp)
    elif case == "slurm":
        slurm(tmp)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        tmp = tempfile.mkdtemp(prefix="rcl-sim-cluster.")
        try:
            inside(sys.argv[2], tmp)
        finally:
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
    if case == "slurm" and (shutil.which("slurmctld") is None or shutil.which("munged") is None):
        print("SKIP: slurmctld/munged not installed (scripts/setup.sh --with-tests installs slurm-wlm and munge)")
        sys.exit(SKIP)
    nodes, unlisted = CASES[case]
    os.environ["RCL_BINARY"] = os.path.abspath(sys.argv[2])
    cmd = [SIM, "--nodes", str(nodes), "--timeout", "400"] + [a for k in unlisted for a in ("--unlisted", str(k))]
    # The Slurm case runs on node 0 of a Slurm made of the simulated nodes.
    slurm_cluster = [os.path.join(REPO, "scripts", "slurm", "local_cluster.sh")] if case == "slurm" else []
    inner = [sys.executable, os.path.abspath(__file__), "--inside", case]
    sys.exit(subprocess.run(cmd + ["--"] + slurm_cluster + inner).returncode)


if __name__ == "__main__":
    main()
