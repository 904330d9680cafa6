"""Memory limits for one call, one block or one request, inside a running
Python process.

memlimits puts a limit on the memory that a piece of code allocates (the
*allocation* limit) or holds (the *held* limit), measured by sampling every
allocation the interpreter makes, and stops just that code when it goes
over: its next allocation fails, Python raises MemoryError, and the
``with`` block turns it into :class:`LimitExceeded`.  The rest of the
process (other threads, other requests) carries on.

Three ways in::

    with memlimits.limit(held="256MiB") as t:     # a block
        data = yaml.safe_load(untrusted)

    memlimits.call(json.loads, text, held="64MiB")  # one call

    app = memlimits.wsgi.LimitMiddleware(app, held="64MiB")  # per request

and a whole program under ``memlimits run --heap-limit ...``.

Rules (docs/python.md has the reasons):

* A limit belongs to the thread that entered it: threads started inside
  the block are not limited by it (enter a shared :class:`Task` there).
* Blocks nest: the inner block's allocations count for the outer one too.
  The block whose own limit was reached raises LimitExceeded; a block
  inside it sees the MemoryError go through unchanged.
* Exceptions raised inside a block that was not stopped go through
  unchanged.  A stopped block raises LimitExceeded from whatever came out
  of it (chained as ``__context__``), even when the code swallowed the
  MemoryError; KeyboardInterrupt, SystemExit and GeneratorExit always go
  through unchanged.
* The task follows the thread, not the code: a generator made inside a
  block and resumed outside is not limited; a block inside a generator
  that stays open across a ``yield`` charges whoever runs in between.
* Sizes are ints (bytes) or strings with the command's units:
  "512", "64k", "64KiB", "50M", "50MiB", "2G", "2GiB" (all binary).
"""

import re as _re

from . import _memlimits
from ._memlimits import capabilities, heap, is_interrupted

__all__ = [
    "LimitExceeded", "Task", "limit", "call", "heap", "global_limit",
    "set_global_limit", "write_metrics", "capabilities", "parse_size",
    "is_interrupted",
]

# Written once, in configure.ac: setup.py compiles it into _memlimits
# (python/README.md, "Version").
__version__ = _memlimits.__version__

# ml_status values (include/memlimits.h).
_REASONS = {1: "alloc_limit", 2: "global_limit", 3: "cancelled",
            4: "held_limit"}

_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
          "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(size):
    """Bytes from an int or a string such as "50MiB" (binary units, as
    the memlimits command takes them: k/K/KB/KiB, M/MB/MiB, G/GB/GiB,
    T/TB/TiB).  None stays None (no limit).  ValueError otherwise."""
    if size is None:
        return None
    if isinstance(size, bool):
        raise ValueError("a size is an int or a string, not a bool")
    if isinstance(size, int):
        if size < 0:
            raise ValueError("a size cannot be negative: %d" % size)
        return size
    if not isinstance(size, str):
        raise ValueError("a size is an int or a string: %r" % (size,))
    s = size.strip()
    i = 0
    # ASCII digits only: str.isdigit and int() take "٣٤" as 34.
    while i < len(s) and "0" <= s[i] <= "9":
        i += 1
    unit = s[i:].strip().lower()
    if i == 0 or unit not in _UNITS:
        raise ValueError("not a size: %r (bytes, or k/M/G/T with an "
                         "optional B or iB)" % (size,))
    n = int(s[:i]) * _UNITS[unit]
    if n >= 1 << 64:
        raise ValueError("size too large: %r" % (size,))
    return n


class LimitExceeded(MemoryError):
    """A block, call or request was stopped at its memory limit.

    Attributes: ``reason`` ("held_limit", "alloc_limit", "global_limit"
    or "cancelled"), ``limit`` (the limit reached, in bytes; None for the
    global limit and a cancellation), ``held`` and ``allocated`` (the
    task's estimates, in bytes, when the block ended)."""

    def __init__(self, reason, limit, held, allocated, detail=""):
        self.reason = reason
        self.limit = limit
        self.held = held
        self.allocated = allocated
        self.detail = detail
        msg = "memlimits: %s" % reason.replace("_", " ")
        if limit is not None:
            msg += " %d bytes" % limit
        msg += " reached (held %d, allocated %d bytes)" % (held, allocated)
        super().__init__(msg)


_UNIT_BYTES = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
               "TiB": 1 << 40}
# Compiled at the first stop (re's cache), not at import: a compile at
# import warmed re's compiler for the program (-2.6 % on a regex loop
# with the module imported, in make bench-python).
_ESTIMATE = r"\b(held|allocated) ~([0-9.]+) ([KMGT]iB|B)\b"


def _trip_estimates(detail):
    found = {k: int(float(v) * _UNIT_BYTES[u])
             for k, v, u in _re.findall(_ESTIMATE, detail)}
    return found.get("held"), found.get("allocated")


_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)


class Task(_memlimits._Task):
    """One budget (a held limit, an allocation limit, the process's
    global limit) for work that may run on several threads.

    ``with task:`` enters the task on the calling thread for the block (a
    *slice*): every thread in a ``with task:`` at the same time counts
    toward the same limits.  A thread enters a task once at a time
    (entering it again inside its own block raises RuntimeError).  Once the
    task is stopped, its blocks raise LimitExceeded, and entering it again
    raises LimitExceeded at once.

    ``status`` is None while the task runs, else the reason it stopped;
    ``held`` and ``allocated`` are its estimates in bytes.  The ``with``
    statement's ends are C (nothing allocates between a stopped block and
    the task's leave)."""

    def __init__(self, held=None, alloc=None, global_limit=False):
        super().__init__(held=parse_size(held), alloc=parse_size(alloc),
                         global_limit=bool(global_limit))

    @property
    def _t(self):
        return self

    @property
    def status(self):
        return _REASONS.get(self.status_code)

    def _exceeded(self, code):
        reason = _REASONS.get(code, "stopped")
        lim = {"held_limit": self.held_limit,
               "alloc_limit": self.alloc_limit}.get(reason)
        detail = self.describe()
        held, allocated = _trip_estimates(detail)
        # The estimates at the stop (ml_task_describe's), or now's when
        # that line gives none.
        if held is None:
            held = self.held
        if allocated is None:
            allocated = self.allocated
        return LimitExceeded(reason, lim, held, allocated, detail)

    def __repr__(self):
        return ("<memlimits.Task held_limit=%r alloc_limit=%r status=%r "
                "held=%d allocated=%d>" % (self.held_limit, self.alloc_limit,
                                          self.status, self.held,
                                          self.allocated))


def limit(held=None, alloc=None, global_limit=False):
    """A new :class:`Task` to use in one ``with`` block:

        with memlimits.limit(held="256MiB", alloc="4GiB") as t:
            run_untrusted()
        t.held, t.allocated, t.status

    Over a limit, the block's allocations fail and the block raises
    LimitExceeded (a MemoryError)."""
    return Task(held=held, alloc=alloc, global_limit=global_limit)


def call(fn, *args, held=None, alloc=None, global_limit=False, **kw):
    """fn(*args, **kw) under a limit: its result, or LimitExceeded."""
    with Task(held=held, alloc=alloc, global_limit=global_limit):
        return fn(*args, **kw)


def global_limit():
    """The process's global memory limit in bytes, or None."""
    return _memlimits.global_limit()


def set_global_limit(size):
    """Set the process's global memory limit (a size, or None for none).
    When the heap goes over it, the largest task made with
    ``global_limit=True`` is stopped."""
    rc = _memlimits.set_global_limit(parse_size(size))
    if rc < 0:
        raise ValueError("memlimits: set_global_limit(%r) refused" % size)


def write_metrics(file):
    """Write the process's metrics (Prometheus text) to a file object
    with fileno() or a file descriptor."""
    if hasattr(file, "flush"):
        file.flush()
    _memlimits.write_metrics(file)
