"""The trial's intra-op threads: how many, on which cores, and who chose.

torch's CPU default is one OpenMP thread per core, and libgomp's threads
spin-wait for each other at the end of every parallel region: when a
neighbour holds one core, the thread that shares it stalls all the others,
and a request took 10-40× longer (issue 31). So the worker chooses:

- threads = usable cores − 1 (at least 1): a neighbour on one core has a core
  of its own to run on, and the sampler too;
- the child is pinned to the last `threads` of the worker's usable cores, so
  the core it leaves free is always the same one and the contention probe can
  tell other processes' CPU on the trial's cores from a neighbour on the free
  one;
- libgomp's wait policy is left at its default (spin, then sleep): with a core
  to spare, no thread of the trial shares one. A passive policy
  (OMP_WAIT_POLICY=PASSIVE, which the wheel's bundled libgomp honours) kept
  every core but one thread still sat beside the neighbour; on the loaded box
  it was not told apart from one thread, and it adds a futex wake to every
  parallel region of a quiet run (docs/benchmarks.md, "Threads beside a busy
  core").

`threads=N` is the user's count (1 to the usable cores); the child is then
pinned to the last N usable cores. Usable cores are os.sched_getaffinity's
(a worker started under taskset or a cpuset gets only those), not
os.cpu_count. Pure apart from usable_cores(): no torch here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from worker.catalog import SpecError
from worker.i18n import _
from worker.reportparts import Threads

WAIT_POLICY = "libgomp default (spin, then sleep)"  # OMP_WAIT_POLICY left unset
# Variables the program's torch (and its BLAS) read at start for the thread count.
ENV_NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

WHY_WORKER = ("usable cores − 1 (at least 1), pinned: a neighbour on one core has a core the "
              "trial leaves free, so no spin-waiting thread of the trial shares a core with it")
WHY_ONE = "the worker has one usable core: one thread, nothing to leave free"
WHY_RANKS = "{ranks} ranks: every usable core, one rank's threads on each at least"
WHY_USER = "asked for with threads={n}"


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    cores: tuple[int, ...]    # the cores the trial runs on
    usable: tuple[int, ...]   # the worker's usable cores
    chosen_by: Literal["worker", "user"]
    why: str

    @property
    def pinned(self) -> bool:
        """Pinned to fewer cores than the worker has (all of them is no pin)."""
        return set(self.cores) != set(self.usable)

    @property
    def free(self) -> tuple[int, ...]:
        """The usable cores the trial leaves to the sampler and neighbours."""
        return tuple(c for c in self.usable if c not in self.cores)

    def env(self) -> dict[str, str]:
        """What the child's torch reads at start (a program that sets its own
        count, e.g. torch.set_num_threads, wins)."""
        return {name: str(self.threads) for name in ENV_NAMES}

    def to_report(self) -> Threads:
        return {"threads": self.threads, "cores": list(self.cores), "pinned": self.pinned,
                "free_cores": list(self.free), "usable_cores": list(self.usable),
                "wait_policy": WAIT_POLICY, "chosen_by": self.chosen_by, "why": self.why}


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on (its affinity), not os.cpu_count."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return tuple(range(os.cpu_count() or 1))


def choose(requested: int, usable: tuple[int, ...], ranks: int = 1) -> ThreadChoice:
    """The choice for a trial: `requested` is the threads param (0: the
    worker chooses); `ranks`, a training trial's processes, each get a core
    where there are enough. Raises SpecError when the count does not fit."""
    if requested:
        check(requested, usable)
        return ThreadChoice(requested, usable[-requested:], usable, "user",
                            WHY_USER.format(n=requested))
    if len(usable) == 1:
        return ThreadChoice(1, usable, usable, "worker", WHY_ONE)
    n = max(len(usable) - 1, min(ranks, len(usable)))
    if n == len(usable):
        return ThreadChoice(n, usable, usable, "worker", WHY_RANKS.format(ranks=ranks))
    return ThreadChoice(n, usable[-n:], usable, "worker", WHY_WORKER)


def check(requested: int, usable: tuple[int, ...]) -> None:
    if not 1 <= requested <= len(usable):
        raise SpecError(f"threads={requested}", _(
            "`threads={n}`: this worker has {count} usable cores ({cores}); use threads=1 to "
            "threads={count}, or leave threads out and the worker chooses", n=requested,
            count=len(usable), cores=cores_text(usable)), "threads=N")


def cores_text(cores) -> str:
    """0-3,6 for (0, 1, 2, 3, 6): short enough for a card."""
    cores, parts, i = sorted(cores), [], 0
    while i < len(cores):
        j = i
        while j + 1 < len(cores) and cores[j + 1] == cores[j] + 1:
            j += 1
        parts.append(str(cores[i]) if i == j else f"{cores[i]}-{cores[j]}")
        i = j + 1
    return ",".join(parts)
