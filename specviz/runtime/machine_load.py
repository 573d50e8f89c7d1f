"""How busy the machine is while this process measures something: the other processes' CPU time over the
interval (from /proc/stat, less this process's own), the load average and the cores. A cost curve, a kernel
choice or a calibration is stored only when measured on a quiet machine (engine.costmodel); one measured under
load serves this process alone and is measured again later.

The decisive figure is the others' CPU time, not the load average: the load average also counts this process's
own threads (it is high right after the model loads) and lags a minute behind."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# other processes may use this share of one core while we measure (a quiet machine here: 0.00-0.05; one
# busy loop beside us: about 1.0)
QUIET_OTHERS_CORES = 0.2
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TICK_SLACK = 2


@dataclass(frozen=True)
class MachineLoad:
    """What the machine did beside this process over `seconds`: others' CPU in cores, the 1-minute load
    average at the start and the end, and the cores there are."""
    others_cores: float
    load_before: float
    load_after: float
    cores: int
    seconds: float

    @property
    def quiet(self) -> bool:
        return self.others_cores <= QUIET_OTHERS_CORES

    def why_busy(self) -> str | None:
        if self.quiet:
            return None
        return (f"other processes used {self.others_cores:.2f} of {self.cores} cores while it was measured "
                f"(a quiet machine: under {QUIET_OTHERS_CORES}; load average {self.load_after:.2f})")


def _cgroup_ticks() -> int | None:
    """The CPU time of every process in this container (cgroup v2's cpu.stat, v1's cpuacct.usage) in ticks; None
    outside one. In a container /proc/stat counts the whole host: other tenants would never let it read quiet."""
    try:
        for line in Path("/sys/fs/cgroup/cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return round(int(line.split()[1]) / 1e6 * _TICKS)
    except (OSError, ValueError):
        pass
    try:
        return round(int(Path("/sys/fs/cgroup/cpuacct/cpuacct.usage").read_text()) / 1e9 * _TICKS)
    except (OSError, ValueError):
        return None


def _busy_ticks() -> int | None:
    """The busy CPU ticks of every process that shares this machine's cores with us: the container's (cgroup)
    where there is one, else every process's since boot (the 'cpu' line of /proc/stat); None where neither reads."""
    contained = _cgroup_ticks()
    if contained is not None:
        return contained
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle and iowait
    guest = sum(values[8:10]) if len(values) > 9 else 0       # already counted in user and nice
    return sum(values) - idle - guest


def _own_ticks() -> int:
    """This process's CPU ticks (every thread of it, children that exited and were waited for aside)."""
    times = os.times()
    return round((times.user + times.system) * _TICKS)


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


class LoadWatch:
    """`with LoadWatch() as watch: ...` then watch.result: what the others did meanwhile."""

    def __enter__(self) -> "LoadWatch":
        self._wall, self._busy, self._own, self._load = time.monotonic(), _busy_ticks(), _own_ticks(), _load_average()
        self.result: MachineLoad | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.result = self.now()

    def now(self) -> MachineLoad:
        seconds = max(time.monotonic() - self._wall, 1e-3)
        busy = _busy_ticks()
        others = 0.0
        if busy is not None and self._busy is not None:
            # both counters move in whole ticks, each on its own clock: a tick or two apart is no one else's work
            others = max(0, (busy - self._busy) - (_own_ticks() - self._own) - TICK_SLACK) / _TICKS / seconds
        return MachineLoad(round(others, 3), round(self._load, 2), round(_load_average(), 2), os.cpu_count() or 1,
                           round(seconds, 2))


def sample(seconds: float = 0.5) -> MachineLoad:
    """The others' use of the machine over the next `seconds` (this process sleeping meanwhile)."""
    with LoadWatch() as watch:
        time.sleep(seconds)
    return watch.result


# a Run waits for the other processes to go quiet before it computes (wait_until_quiet): they may use this share of
# one core over a window, read every QUIET_WINDOW_S (100 ms: /proc/stat counts in 10 ms ticks), for at most
# QUIET_WAIT_CAP_S. A click in a browser on the same two cores took 1.3-1.5 cores for the first 100 ms and under 0.2
# for the next (docs/benchmarks.md, "Issue 70: the prefill under the click")
QUIET_START_CORES = 0.3
QUIET_WINDOW_S = 0.1
QUIET_WAIT_CAP_S = 0.5


def wait_until_quiet(cap_s: float = QUIET_WAIT_CAP_S, window_s: float = QUIET_WINDOW_S,
                     cores: float = QUIET_START_CORES, read: Callable[[float], MachineLoad] | None = None) -> float:
    """Sleep window by window until the other processes used at most `cores` of a core over one window, at most
    cap_s / window_s windows; the seconds waited. read(seconds) is one window's reading (sample; tests give theirs)."""
    read = read or sample
    started = time.monotonic()
    for _ in range(max(1, round(cap_s / window_s))):
        if read(window_s).others_cores <= cores:
            break
    return time.monotonic() - started
