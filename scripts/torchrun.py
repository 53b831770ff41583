#!/usr/bin/env python3
"""torchrun, with its agents' exit barrier left out after a failure and bounded otherwise: the same
flags, the same launcher.

After its workers end, each torchrun agent waits at an exit barrier for every other node's agent
("Waiting 300 seconds for other agents to finish"). torch up to 2.1 (Debian 12's 1.13 among them)
enters it after a failure too, and the wait is hard-coded at 300 s (torch 1.13 to 2.11): when a
node dies its agent never arrives, so every surviving node's torchrun sits out the whole 300 s
after the job's verdict is known (pytorch/pytorch#99051; the option pytorch/pytorch#195543 adds
is not in a release yet). The barrier only guards elastic restarts (an early finisher taken for
a scale-down), which rocm-conformance-llm does not use (--max_restarts 0). So, as torch 2.2 and
later do, an agent whose workers failed leaves at once; after a success it waits at most
RCL_EXIT_BARRIER_S (default 30 s; an explicit value from a newer torchrun's own flag wins).

    python3 scripts/torchrun.py --nnodes 2 --nproc_per_node 8 ... build/rocm-conformance-llm ...
"""
import os
import sys

from torch.distributed.elastic.agent.server import api, local_elastic_agent
from torch.distributed.run import main

_barrier_s = float(os.environ.get("RCL_EXIT_BARRIER_S", "30"))
_agent_init = local_elastic_agent.LocalElasticAgent.__init__
_exit_barrier = api.SimpleElasticAgent._exit_barrier


def _init_with_bounded_barrier(self, *args, **kwargs):
    kwargs.setdefault("exit_barrier_timeout", _barrier_s)
    _agent_init(self, *args, **kwargs)


def _exit_barrier_after_success_only(self):
    if self._worker_group.state == api.WorkerState.FAILED:
        return
    _exit_barrier(self)


local_elastic_agent.LocalElasticAgent.__init__ = _init_with_bounded_barrier
api.SimpleElasticAgent._exit_barrier = _exit_barrier_after_success_only

if __name__ == "__main__":
    sys.exit(main())
