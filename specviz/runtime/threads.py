"""How many threads this process should compute with: the container's CPU quota, not the host's core count.

A container can report the host's CPUs (Spaces have been seen reporting 16 on a 2-CPU quota); torch then starts
one thread per reported core, and threads beyond the quota only wait for each other. The quota is read from the
cgroup (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`) and the process's CPU affinity, the smallest
wins; SPECVIZ_THREADS overrides."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _own_cgroup_dirs(root: Path) -> list[Path]:
    """The cgroup folders that may hold this process's CPU limit: its own (from /proc/self/cgroup) and the root."""
    folders = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers in ("", "cpu", "cpu,cpuacct", "cpuacct,cpu") or "cpu" in controllers.split(","):
                for base in (root, root / "cpu", root / "cpu,cpuacct"):
                    folders.append(base / path.lstrip("/"))
    except (OSError, ValueError):
        pass
    return [*folders, root, root / "cpu", root / "cpu,cpuacct"]


def cgroup_quota(root: Path = CGROUP) -> float | None:
    """CPUs the cgroup lets this process use (quota / period), None when unlimited or unknown."""
    for folder in _own_cgroup_dirs(root):
        try:
            text = (folder / "cpu.max").read_text().split()
            if text and text[0] != "max":
                return int(text[0]) / int(text[1])
            if text:
                return None
        except (OSError, ValueError, IndexError):
            pass
        try:
            quota = int((folder / "cpu.cfs_quota_us").read_text())
            period = int((folder / "cpu.cfs_period_us").read_text())
            return quota / period if quota > 0 and period > 0 else None
        except (OSError, ValueError):
            pass
    return None


def usable_cpus(root: Path = CGROUP) -> int:
    """Whole CPUs this process may use: the cgroup quota (rounded up), the affinity mask and the host's count,
    the smallest; SPECVIZ_THREADS overrides."""
    asked = os.environ.get("SPECVIZ_THREADS", "").strip()
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    counts = [os.cpu_count() or 1]
    if hasattr(os, "sched_getaffinity"):
        counts.append(len(os.sched_getaffinity(0)))
    quota = cgroup_quota(root)
    if quota is not None:
        counts.append(max(1, math.ceil(quota)))
    return max(1, min(counts))


def follow_cpu_quota() -> int:
    """Set torch's intra-op threads (and OpenMP's, for the native kernels) to usable_cpus(); that count."""
    import torch

    threads = usable_cpus()
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
