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

* Threads started inside a block (``threading.Thread.start``) run inside
  its task, and so does work submitted there to a ``ThreadPoolExecutor``
  or a ``multiprocessing.pool.ThreadPool`` (each call a slice of the
  task on the pool's thread): the limit belongs to the work.  Opt out
  with :func:`inherit_threads` (False), or for one thread with
  ``thread.memlimits_inherit = False`` before it starts.
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
* Sizes are ints (bytes) or strings with the command's units, read by
  the library's own parser: "512", "64k", "64KiB", "50M", "50MiB",
  "1.5G", "2GiB" (all binary).  A limit of 0 is refused (leave the
  argument out for none), and so is a block with no limit at all.
"""

import functools as _functools
import re as _re
import sys as _sys
import weakref as _weakref

try:
    from . import _memlimits
except ImportError as _e:
    # Without this, Python's own message for a package with no compiled
    # extension beside it ("partially initialized module ... most likely
    # due to a circular import") sends people looking for a cycle.
    import os as _os
    _here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.isfile(_os.path.join(_here, "..", "memlimits_build.py")):
        _why = ("this is the package's source folder (python/ of a "
                "checkout), which has no compiled extension: build it "
                "(make, then PYTHONPATH=BUILDDIR/python/build/pkg; or pip "
                "install ./python) and run from another folder")
    else:
        _why = ("the compiled extension memlimits._memlimits is missing or "
                "does not load (%s): reinstall the package" % _e)
    raise ImportError("memlimits: cannot import memlimits._memlimits from "
                      "%s: %s" % (_here, _why), name="memlimits._memlimits",
                      path=_here) from _e
from ._memlimits import capabilities, heap, is_interrupted

__all__ = [
    "LimitExceeded", "Task", "limit", "call", "heap", "global_limit",
    "set_global_limit", "write_metrics", "capabilities", "parse_size",
    "is_interrupted", "inherit_threads", "profile_at_stop",
]

# Written once, in configure.ac: memlimits_build.py compiles it into
# _memlimits
# (python/README.md, "Version").
__version__ = _memlimits.__version__

# ml_status values (include/memlimits.h).
_REASONS = {1: "alloc_limit", 2: "global_limit", 3: "cancelled",
            4: "held_limit"}

def _named(name, msg):
    return "%s: %s" % (name, msg) if name else msg


def parse_size(size, name=None):
    """Bytes from an int or a string such as "50MiB" or "1.5G", read by
    the library's own parser, as the memlimits command reads its sizes
    (binary units: k/K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB, B or none; a
    fraction rounds down to a whole byte; no blanks).  None stays None.
    ValueError for a string that is not a size or a negative int,
    TypeError for anything but an int or a str; ``name`` (the argument's)
    starts the message."""
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError(_named(name, "a size is an int or a string, not "
                               "%s" % type(size).__name__))
    if isinstance(size, int):
        if size < 0:
            raise ValueError(_named(name, "a size cannot be negative: "
                                    "%d" % size))
        if size >= 1 << 64:
            raise ValueError(_named(name, "size too large: %d" % size))
        return size
    try:
        return _memlimits.parse_size(size)
    except ValueError:
        raise ValueError(_named(name, "not a size: %r (bytes, or with a "
                                "suffix: 64MiB, 1.5G)" % (size,))) from None


_NO_LIMIT = (1 << 64) - 1


def _limit_size(size, name):
    """A limit's size: as parse_size, and neither 0 (say "no limit" by
    leaving the argument out, as the command's --heap-limit 0 is refused)
    nor 2**64 - 1 (the library's "no limit")."""
    n = parse_size(size, name)
    if n == 0:
        raise ValueError("%s=%r: a limit of 0 bytes; say no limit by "
                         "leaving the argument out" % (name, size))
    if n == _NO_LIMIT:
        raise ValueError("%s=%r: 2**64-1 bytes would mean no limit; say "
                         "no limit by leaving the argument out"
                         % (name, size))
    return n


def _some_limit(where, held, alloc, global_limit):
    if held is None and alloc is None and not global_limit:
        raise ValueError("%s: no limit given: held=, alloc= (sizes) or "
                         "global_limit=True (a block with no limit is a "
                         "Task() that measures)" % where)


def _http_status(status, line_ok):
    """The middlewares' ``status=``: an int from 100 to 599 or, where
    ``line_ok`` (WSGI), a status line ("503 Service Unavailable")."""
    if isinstance(status, str) and line_ok:
        m = _re.fullmatch(r"([1-5][0-9][0-9]) [^\r\n]*", status)
        if not m:
            raise ValueError("status=%r: an HTTP status (an int from 100 "
                             "to 599, or a line such as \"503 Service "
                             "Unavailable\")" % (status,))
        return status
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError("status=%r: an HTTP status is an int%s, not %s"
                        % (status, " or a status line" if line_ok else "",
                           type(status).__name__))
    if not 100 <= status <= 599:
        raise ValueError("status=%r: an HTTP status is from 100 to 599"
                         % (status,))
    return status


class _StopFields:
    """The fields and the message of a stop, shared by LimitExceeded and
    memlimits.celery's TaskLimitExceeded (the same stop as an Exception)."""

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
        self._msg = msg
        # The fields are the exception's args, so that it is rebuilt whole
        # where an exception is rebuilt from its args: pickle (Celery's
        # prefork pool hands a task's exception to the parent that way),
        # and Celery's JSON result backend, which stores args and calls
        # the class with them (with the message alone as args, both fell
        # back: TypeError, then a plain Exception).
        super().__init__(reason, limit, held, allocated, detail)

    def __str__(self):
        return self._msg


class LimitExceeded(_StopFields, MemoryError):
    """A block, call or request was stopped at its memory limit.

    Attributes: ``reason`` ("held_limit", "alloc_limit", "global_limit"
    or "cancelled"), ``limit`` (the limit reached, in bytes; None for the
    global limit and a cancellation), ``held`` and ``allocated`` (the
    task's estimates, in bytes, when the block ended), ``held_by``
    (where the task's held memory was allocated, by its innermost Python
    frames: a list of ``(frames, bytes)``, largest first, ``frames`` such
    as "app.py:load_rows:12 < app.py:cache_everything"; empty unless
    stacks are captured: a middleware, :func:`profile_at_stop`)."""

    held_by = ()


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


def _forget_frames(exc):
    """Clear the frames of exc's traceback, and of the exceptions it
    chains (__context__, __cause__), as traceback.clear_frames does, so
    that the locals of stopped code (the runaway's list) go back when the
    exception is dropped, not at the next collection of the cyclic
    garbage collector: an exception and the frames of its traceback
    reference each other (a frame's locals hold the exception caught
    there).  The exceptions, their fields, messages and tracebacks'
    line numbers stay; a frame still running is left as it is."""
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            try:
                tb.tb_frame.clear()
            except RuntimeError:
                pass
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    return exc


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
        if not isinstance(global_limit, bool):
            raise TypeError("global_limit: True or False, not %r"
                            % (global_limit,))
        super().__init__(held=_limit_size(held, "held"),
                         alloc=_limit_size(alloc, "alloc"),
                         global_limit=global_limit)
        _live[self.task_id] = self
        if _patched != _PATCHABLE:
            _patch_threads()

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
        exc = LimitExceeded(reason, lim, held, allocated, detail)
        exc.held_by = _held_by(self._held_at_stop())
        return exc

    def _held_at_stop(self):
        """What the task held when it first raised LimitExceeded, as
        collapsed stacks (bytes; empty while stacks are not captured),
        taken once, and written to profile_at_stop's file then."""
        try:
            return self.__stop_profile
        except AttributeError:
            pass
        prof = b""
        if _capturing:
            try:
                prof = _memlimits.held_profile(self)
            except OSError:
                prof = b""
        self.__stop_profile = prof
        if _profile_path is not None and prof:
            _write_stop_profile(_profile_path, self, prof)
        return prof

    def __repr__(self):
        return ("<memlimits.Task held_limit=%r alloc_limit=%r status=%r "
                "held=%d allocated=%d>" % (self.held_limit, self.alloc_limit,
                                          self.status, self.held,
                                          self.allocated))


# Held profiles at the stop (issue 43, item 6).  Stacks are captured at
# samples once a middleware is made or profile_at_stop is called (the
# library's ml_set_stack_capture; its cost: docs/python.md, "Pictures"),
# and Python's frames are named in them where the module's frame source
# runs (capabilities()["python_frames"]: CPython 3.11).
_capturing = False
_profile_path = None
# A frame of Python's in a profile (src/frames.c): "file:function", with
# ":line" after it for the innermost one; the file is a path ending .py or
# a name in angle brackets ("<stdin>", "<frozen ...>").
_PY_FRAME = r"\A(?:[^;]*\.pyw?|<[^;>]*>):[^:;]+(?::[0-9]+)?\Z"


def _capture_stacks():
    global _capturing
    if not _capturing:
        try:
            _memlimits.set_stack_capture(True)
        except OSError:
            return False
        _capturing = True
    return True


def profile_at_stop(path):
    """Write what a stopped block, call or request held, by call stack,
    to ``path`` (a str or os.PathLike) when it raises LimitExceeded: the
    collapsed-stack format of ``memlimits run --profile``'s held files,
    with Python's frames ("file:function", and ":line" after the innermost
    one) between the C frames, for
    ``memlimits flamegraph --held`` or any flame graph tool.  Each stop
    writes the file anew (whole: written beside it, then renamed), so it
    holds the last stop's picture.  Turns stack capture on for the
    process.  ``None`` stops writing (capture stays on).  Returns the
    path given before, or None."""
    global _profile_path
    import os
    was = _profile_path
    if path is None:
        _profile_path = None
        return was
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("path: a str or os.PathLike, not %s"
                        % type(path).__name__)
    p = os.fsdecode(os.fspath(path))
    if not p:
        raise ValueError("path: an empty path")
    if not _capture_stacks():
        raise OSError("memlimits: this process cannot capture call stacks "
                      "(capabilities()['mask'] lacks stacks)")
    _profile_path = p
    return was


def _held_by(profile, top=5):
    """The held memory of a collapsed-stack profile by its innermost two
    Python frames ("inner < caller"), largest first: [(frames, bytes)]."""
    if not profile:
        return []
    frame = _re.compile(_PY_FRAME)
    by = {}
    for line in profile.decode("utf-8", "replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        py = [f for f in reversed(stack.split(";")) if frame.search(f)]
        if py:
            key = " < ".join(py[:2])
            by[key] = by.get(key, 0) + int(n)
    return sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


def _held_by_text(exc, top=3):
    """'; held by a.py:f:3 < a.py:g (95 %), ...' for a stop's log line,
    '' when the stop has no frames."""
    if not exc.held_by:
        return ""
    total = sum(n for _, n in exc.held_by) or 1
    return "; held by " + ", ".join(
        "%s (%d %%)" % (f, round(100 * n / total))
        for f, n in exc.held_by[:top])


def _write_stop_profile(path, task, prof):
    import os
    lim = {"held_limit": task.held_limit,
           "alloc_limit": task.alloc_limit}.get(task.status)
    held = sum(int(line.rpartition(b" ")[2] or 0)
               for line in prof.splitlines()
               if line.rpartition(b" ")[2].isdigit())
    head = ["# memlimits held at the stop", "# pid %d" % os.getpid(),
            "# program %s" % os.path.basename(_sys.executable or "python"),
            "# held_bytes %d" % held]
    if lim is not None:
        head.append("# %s %d" % (task.status, lim))
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write("\n".join(head).encode() + b"\n" + prof)
        os.replace(tmp, path)
    except OSError as e:
        import logging
        logging.getLogger("memlimits").warning(
            "memlimits: cannot write the profile at the stop to %s: %s",
            path, e)


# Threads and pools started inside a block run inside its task (issue 42,
# item 3): the Task of the thread's innermost slice, found from
# ml_task_current's address (a Task made here registers itself).  Patched
# at the first Task made, not at import (importing threading and the
# pools would cost every program that imports memlimits), and again at
# each Task made for the pool modules imported since.
_live = _weakref.WeakValueDictionary()
_inherit = True
_PATCHABLE = frozenset(("threading", "concurrent.futures.thread",
                        "multiprocessing.pool"))
_patched = set()


def inherit_threads(enabled=True):
    """Whether threads started inside a block (threading.Thread.start),
    work submitted to a ThreadPoolExecutor and to a
    multiprocessing.pool.ThreadPool inside one run inside the block's
    task (the default), or outside any task (False).  One thread opts
    out with ``thread.memlimits_inherit = False`` before its start()."""
    global _inherit
    _inherit = bool(enabled)


def _current_task():
    if not _inherit:
        return None
    tid = _memlimits.current_task_id()
    return _live.get(tid) if tid else None


def _run_in(task, fn, *args, **kw):
    # On a thread inside the task already (a pool's caller running the
    # work itself, a wrapper of the work's own): run as it is.
    if _memlimits.current_task_id() == task.task_id:
        return fn(*args, **kw)
    with task:
        return fn(*args, **kw)


def _pool_thread(thread):
    # A pool's own threads (its workers, its handlers) live past the
    # block: the work handed to them carries the task instead.  anyio's
    # worker threads too (its WorkerThread, started by the first
    # to_thread.run_sync that finds none idle): inheriting, the thread
    # stayed in the task of the request that started it, and every
    # later request's sync endpoint ran there (a runaway stopped that
    # request's task, not its own, and answered 500).
    target = getattr(thread, "_target", None)
    mod = getattr(target, "__module__", None) or ""
    cls_mod = type(thread).__module__
    return (mod in ("concurrent.futures.thread", "multiprocessing.pool")
            or cls_mod == "multiprocessing.dummy"
            or cls_mod.startswith("anyio."))


def _patch_threads():
    mods = _sys.modules
    if "threading" not in _patched:
        import threading
        start = threading.Thread.start

        @_functools.wraps(start)
        def _start(self):
            task = _current_task()
            if (task is not None and getattr(self, "memlimits_inherit", True)
                    and not _pool_thread(self)):
                run = self.run

                def run_in_task():
                    with task:
                        run()
                self.run = run_in_task
            return start(self)
        threading.Thread.start = _start
        _patched.add("threading")
    if "concurrent.futures.thread" not in _patched and \
            "concurrent.futures.thread" in mods:
        cls = mods["concurrent.futures.thread"].ThreadPoolExecutor
        submit = cls.submit

        @_functools.wraps(submit)
        def _submit(self, fn, /, *args, **kw):
            task = _current_task()
            if task is not None:
                fn = _functools.partial(_run_in, task, fn)
            return submit(self, fn, *args, **kw)
        cls.submit = _submit
        _patched.add("concurrent.futures.thread")
    if "multiprocessing.pool" not in _patched and \
            "multiprocessing.pool" in mods:
        cls = mods["multiprocessing.pool"].ThreadPool
        for name in ("apply_async", "_map_async", "imap", "imap_unordered"):
            _patch_pool_method(cls, name)
        _patched.add("multiprocessing.pool")


def _patch_pool_method(cls, name):
    # ThreadPool only: its work is not pickled (a process pool's is, and
    # runs in other processes, outside this one's tasks anyway).
    orig = getattr(cls, name)

    @_functools.wraps(orig)
    def method(self, func, *args, **kw):
        task = _current_task()
        if task is not None:
            func = _functools.partial(_run_in, task, func)
        return orig(self, func, *args, **kw)
    setattr(cls, name, method)


def limit(held=None, alloc=None, global_limit=False):
    """A new :class:`Task` to use in one ``with`` block:

        with memlimits.limit(held="256MiB", alloc="4GiB") as t:
            run_untrusted()
        t.held, t.allocated, t.status

    Over a limit, the block's allocations fail and the block raises
    LimitExceeded (a MemoryError).  At least one limit must be given
    (ValueError otherwise: a block to measure is a ``Task()``)."""
    _some_limit("memlimits.limit", held, alloc, global_limit)
    return Task(held=held, alloc=alloc, global_limit=global_limit)


def call(fn, *args, held=None, alloc=None, global_limit=False, **kw):
    """fn(*args, **kw) under a limit: its result, or LimitExceeded."""
    _some_limit("memlimits.call", held, alloc, global_limit)
    with Task(held=held, alloc=alloc, global_limit=global_limit):
        return fn(*args, **kw)


def global_limit():
    """The process's global memory limit in bytes, or None."""
    return _memlimits.global_limit()


def set_global_limit(size):
    """Set the process's global memory limit (a size, or None for none).
    When the heap goes over it, the largest task made with
    ``global_limit=True`` is stopped."""
    n = None if size is None else _limit_size(size, "size")
    rc = _memlimits.set_global_limit(n)
    if rc < 0:
        raise ValueError("memlimits: set_global_limit(%r) refused" % size)


def write_metrics(file):
    """Write the process's metrics (Prometheus text) to a file object
    with fileno() or a file descriptor."""
    if hasattr(file, "flush"):
        file.flush()
    _memlimits.write_metrics(file)
