"""Installed only into the libtorch 2.x test root by scripts/test_libtorch2.sh (never shipped).

Debian sid builds torch without libuv, yet its torchrun constructs TCPStore with the libuv
default (static and c10d rendezvous pass no use_libuv), so every torchrun launch fails there
with "use_libuv was requested but PyTorch was built without libuv support". Wheels have libuv:
this is Debian's packaging, not the project. TCPStore becomes a subclass that asks for the
non-libuv server, so the launcher tests can run torchrun there.
"""
import importlib.abc
import sys


class _NoLibuvTCPStore(importlib.abc.MetaPathFinder):
    """Patches at the first torch.distributed submodule import: torch.distributed's __init__
    has then created the c10d bindings and bound TCPStore, and imports its submodules next."""

    def find_spec(self, name, path=None, target=None):
        package = sys.modules.get("torch.distributed")
        c10d = getattr(sys.modules.get("torch._C"), "_distributed_c10d", None)
        if name.startswith("torch.distributed.") and package is not None and c10d is not None:
            sys.meta_path.remove(self)
            base = c10d.TCPStore

            class TCPStore(base):
                def __init__(self, *args, **kwargs):
                    kwargs["use_libuv"] = False
                    super().__init__(*args, **kwargs)

            TCPStore.__name__ = TCPStore.__qualname__ = "TCPStore"
            c10d.TCPStore = TCPStore
            package.TCPStore = TCPStore
        return None  # the regular finders load the module


sys.meta_path.insert(0, _NoLibuvTCPStore())
