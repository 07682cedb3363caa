"""What a measurement records of the machine it ran on, without torch: the CPU's model name and this process's peak
resident memory. One home for the timing stage, the design stage (its wall times) and the benchmarks."""

from __future__ import annotations

import platform
import resource


def rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``): CPU times depend on it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # no /proc/cpuinfo (not Linux): the platform's own name below
        pass
    return platform.processor() or platform.machine()
