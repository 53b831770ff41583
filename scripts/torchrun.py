#!/usr/bin/env python3
"""torchrun, with its agents' exit barrier bounded: the same flags, the same launcher.

After its workers end, each torchrun agent waits at an exit barrier for every other node's agent
("Waiting 300 seconds for other agents to finish"). The wait is hard-coded (300 s) in torch 1.13
to 2.11, and torch up to 2.1 (Debian 12's 1.13 among them) enters it after a failure too: when a
node dies its agent never arrives, so every surviving node's torchrun sits out the whole 300 s
after the job's verdict is known (pytorch/pytorch#99051 asks for a way out; the option
pytorch/pytorch#195543 adds is not in a release yet). The barrier only guards elastic restarts
(an early finisher taken for a scale-down): with --max_restarts 0, as rocm-conformance-llm runs,
waiting longer than the job report takes to spread (well under a minute) serves nothing.

    python3 scripts/torchrun.py --nnodes 2 --nproc_per_node 8 ... build/rocm-conformance-llm ...

RCL_EXIT_BARRIER_S sets the barrier (default 30 s); an explicit value given by a newer torchrun
(its own flag) wins.
"""
import os
import sys

from torch.distributed.elastic.agent.server import local_elastic_agent
from torch.distributed.run import main

_barrier_s = float(os.environ.get("RCL_EXIT_BARRIER_S", "30"))
_agent_init = local_elastic_agent.LocalElasticAgent.__init__


def _init_with_bounded_barrier(self, *args, **kwargs):
    kwargs.setdefault("exit_barrier_timeout", _barrier_s)
    _agent_init(self, *args, **kwargs)


local_elastic_agent.LocalElasticAgent.__init__ = _init_with_bounded_barrier

if __name__ == "__main__":
    sys.exit(main())
