"""What every bench/ table says about the machine it measured on, and how busy it was.

Imported by the scripts in bench/ (and no twin of it kept elsewhere): the CPU's instruction sets
by the names the binary's report uses (platform/device.cpp cpu_instruction_sets), the header line
naming CPU, instruction sets, libtorch and date, and the other processes' CPU share during a run.
"""
import datetime
import os
import platform
import resource
import time

CONTENDED = 0.10  # other processes' CPU share above which a run is flagged as contended

# /proc/cpuinfo flags -> the names a figure states (AVX512 = F+BW+VL+DQ, what libtorch's oneDNN
# bf16 GEMM needs); the same list as the binary's environment.cpu_instruction_sets.
_ISA = (("AVX2", ("avx2",)), ("AVX512", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
        ("AVX512-BF16", ("avx512_bf16",)), ("AVX512-FP16", ("avx512_fp16",)), ("AMX", ("amx_bf16",)))


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    try:
        line = next((l for l in open(cpuinfo) if l.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.split(":", 1)[1].split()) if ":" in line else set()


def instruction_sets(cpuinfo="/proc/cpuinfo"):
    flags = cpu_flags(cpuinfo)
    return [name for name, needed in _ISA if all(f in flags for f in needed)]


def cpu_name():
    try:
        return next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                    platform.processor())
    except OSError:
        return platform.processor()


def machine_line(libtorch):
    """'2-core AMD EPYC (AVX2, AVX512, AVX512-BF16), libtorch 1.13.0, 2026-12-01 04:40 UTC'"""
    isa = ", ".join(instruction_sets()) or "instruction sets unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"{os.cpu_count()}-core {cpu_name()} ({isa}), libtorch {libtorch}, {date}"


def cpu_jiffies():
    """(busy, total) jiffies over all CPUs since boot, from /proc/stat."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)  # idle and iowait are not busy


def others_busy_while(fn):
    """Runs fn(); returns (its result, CPU share other processes used meanwhile)."""
    ticks = os.sysconf("SC_CLK_TCK")
    usage0, (busy0, total0) = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_jiffies()
    result = fn()
    usage1, (busy1, total1) = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_jiffies()
    own = (usage1.ru_utime + usage1.ru_stime - usage0.ru_utime - usage0.ru_stime) * ticks
    return result, max(0.0, (busy1 - busy0 - own) / max(1, total1 - total0))


def wait_until_quiet(max_wait_s, threshold=0.15):
    """Waits (up to max_wait_s) for the machine to go idle; returns the last busy share."""
    deadline = time.time() + max_wait_s
    while True:
        _, busy = others_busy_while(lambda: time.sleep(2.0))
        if busy <= threshold or time.time() >= deadline:
            return busy
