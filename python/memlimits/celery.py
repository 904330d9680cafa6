"""A memory limit per Celery task.

    import memlimits.celery

    @app.task
    @memlimits.celery.limit(held="256MiB", alloc="4GiB")
    def convert(doc): ...

    memlimits.celery.install(app, held="1GiB")     # every task of the app

Each run of a limited task is a :class:`memlimits.Task` of its own, entered
on the thread that runs it: the pool's child process (prefork), the pool's
thread (threads) or the worker's own thread (solo).  A run that goes over
its limit fails its next allocation and raises
:class:`memlimits.LimitExceeded` out of the task: Celery records it as any
exception a task raises (state FAILURE, the exception and its traceback in
the result backend; ``autoretry_for`` and ``on_failure`` see it), while
the worker process keeps running the next tasks.  Celery's own work after
the task (storing the result, logging the traceback) runs after the
task's block has ended, outside the limit.

``limit`` goes under ``@app.task`` (it wraps the function the task runs);
``install`` wraps ``__call__`` of the app's task classes, the hook Celery's
tracer calls when a task class defines it, for the tasks the app has and
those it registers up to the worker's start.  Both nest as blocks do: a
task under ``install`` with a ``limit`` of its own stops at the tighter of
the two, and the block whose limit was reached raises."""

import functools
import inspect

from celery import Celery as _Celery
from celery import signals as _signals
from celery.app.task import Task as _StockTask

from . import LimitExceeded, Task, _StopFields, _limit_size, _some_limit

__all__ = ["limit", "install", "uninstall", "TaskLimitExceeded"]


class TaskLimitExceeded(_StopFields, Exception):
    """What the worker's own bookkeeping is handed in place of a task's
    :class:`memlimits.LimitExceeded` (same fields, same message): an
    Exception, not a MemoryError.

    Celery's worker ends itself when a task fails with a MemoryError
    (``celery/worker/request.py``: ``raise MemoryError('Process got:
    ...')``, taking the whole solo worker down, or prefork's parent), and
    LimitExceeded is one.  The result backend, ``on_failure``,
    ``autoretry_for`` and the ``task_failure`` signal's ``exception`` see
    the LimitExceeded; the worker's log line of the failure and the
    ``task-failed`` event see this."""


def _on_task_failure(sender=None, einfo=None, **_):
    # The task_failure signal is sent after the failure is stored and
    # before the worker's log line, with the ExceptionInfo that
    # the worker then reads (prefork: pickled to the parent).  Its
    # exception is what the worker's MemoryError test sees: billiard's
    # ExceptionWithTraceback around the task's exception (unwrapped
    # there), or the exception itself.
    # An eager run (task.apply, task_always_eager) returns einfo's
    # exception to its caller, and has no worker to end.
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    held = getattr(einfo, "exception", None)
    inner = getattr(held, "exc", None)
    if isinstance(inner, LimitExceeded):
        held.exc = TaskLimitExceeded(*inner.args)
    elif isinstance(held, LimitExceeded):
        einfo.exception = TaskLimitExceeded(*held.args)
    else:
        return
    einfo.type = TaskLimitExceeded


# At import: a LimitExceeded from any block in a task (memlimits.limit
# inside it too) must not end the worker.
_signals.task_failure.connect(_on_task_failure, weak=False,
                              dispatch_uid="memlimits.celery")


def _limits(where, held, alloc, global_limit):
    if callable(held):
        # @memlimits.celery.limit with no parentheses.
        raise TypeError("%s takes sizes: write @%s(held=\"64MiB\") under "
                        "@app.task" % (where, where))
    if not isinstance(global_limit, bool):
        raise TypeError("global_limit: True or False, not %r"
                        % (global_limit,))
    _some_limit(where, held, alloc, global_limit)
    return (_limit_size(held, "held"), _limit_size(alloc, "alloc"),
            global_limit)


def _is_task(obj):
    # A Celery task, or the proxy that @app.task returns before the app
    # is finalized: both send messages.
    return hasattr(obj, "apply_async") and hasattr(obj, "delay")


def limit(held=None, alloc=None, global_limit=False):
    """A decorator that runs the function in a block with these limits
    (sizes as for :func:`memlimits.limit`); it goes under ``@app.task``
    (``@shared_task``), between it and the function::

        @app.task(bind=True)
        @memlimits.celery.limit(held="64MiB")
        def parse(self, text): ...

    The task's name, signature (Celery's argument check at ``delay``) and
    ``bind`` are the function's."""
    lim = _limits("memlimits.celery.limit", held, alloc, global_limit)

    def decorate(fn):
        if _is_task(fn):
            raise TypeError("memlimits.celery.limit goes under @app.task "
                            "(it wraps the function the task runs), not "
                            "over it: %r" % (fn,))
        if not callable(fn):
            raise TypeError("memlimits.celery.limit wraps a function, not "
                            "%s" % type(fn).__name__)

        @functools.wraps(fn)
        def run(*args, **kw):
            with Task(held=lim[0], alloc=lim[1], global_limit=lim[2]):
                return fn(*args, **kw)
        # Celery reads the task's signature with getfullargspec, which
        # does not follow __wrapped__ but takes __signature__: without it,
        # a wrong call (add.delay(1, 2, 3)) was sent instead of refused.
        try:
            run.__signature__ = inspect.signature(fn)
        except (TypeError, ValueError):
            pass
        run.memlimits_limits = lim
        return run
    return decorate


def _traced(task):
    # Run by the worker's tracer, which pushed the task's request (its id,
    # retries, delivery_info) before it called the task.
    req = task.request_stack.top
    return req is not None and not req.called_directly


def _wrapped_call(orig):
    stock = orig is _StockTask.__call__

    @functools.wraps(orig)
    def __call__(self, *args, **kw):
        # Celery's own __call__ pushes a request of its own, with the args
        # alone, over the tracer's: under a custom __call__ that calls it,
        # self.request.id was None in a bound task.  The tracer calls run
        # itself when there is no custom __call__; so does this.  A direct
        # call (task(x), no tracer) goes through Celery's, as it would
        # without the limit.
        fn = self.run if stock and _traced(self) else \
            functools.partial(orig, self)
        lim = getattr(self.app, "_memlimits_celery", None)
        if lim is None:
            return fn(*args, **kw)
        with Task(held=lim[0], alloc=lim[1], global_limit=lim[2]):
            return fn(*args, **kw)
    __call__._memlimits_orig = orig
    return __call__


def _wrap_task(task):
    _wrap_class(type(task))


def _wrap_class(cls):
    call = getattr(cls, "__call__")
    if getattr(call, "_memlimits_orig", None) is not None:
        return            # this class or a base of it is wrapped already
    # In the class's own dict, so that Celery's tracer sees a custom
    # __call__ (trace.task_has_custom) and calls the task, not its run.
    cls.__call__ = _wrapped_call(call)


def _wrap_app(app):
    # app._tasks, the registry: app.tasks would finalize the app.
    for task in list(app._tasks.values()):
        _wrap_task(task)


class _Annotation:
    """In task_annotations: Celery calls annotate with each task class it
    binds; this wraps the class and annotates nothing."""

    def annotate(self, task):
        if isinstance(task, type):
            _wrap_class(task)
        return None

    def annotate_any(self):
        return None


def install(app, held=None, alloc=None, global_limit=False):
    """Every task of ``app`` runs in a block of its own with these limits
    (sizes as for :func:`memlimits.limit`): the tasks the app has, and
    those it registers until its worker starts (the worker's imports,
    ``include``, autodiscovery).  Call it where the app is made, so that
    the worker's processes run it at import; again to change the limits;
    :func:`uninstall` to remove them."""
    # Not hasattr(app, "tasks"): reading it finalizes the app, and a task
    # defined after that was made unwrapped.
    if not isinstance(app, _Celery):
        raise TypeError("memlimits.celery.install: a Celery app, not %r"
                        % (app,))
    app._memlimits_celery = _limits("memlimits.celery.install", held, alloc,
                                    global_limit)
    if not getattr(app, "_memlimits_connected", False):
        # Celery binds every task class as it makes it (a proxy of
        # @app.task evaluated, finalize, register_task) and annotates it
        # there: the hook for a class made after this call.  The sweeps
        # below are for the classes made before it, and for annotations
        # that a configuration loaded later replaces.
        ann = app.conf.task_annotations
        if ann is None:
            ann = []
        elif not isinstance(ann, (list, tuple)):
            ann = [ann]
        app.conf.task_annotations = [_Annotation()] + list(ann)
        try:
            del app.annotations     # Celery's cache of the prepared list
        except AttributeError:
            pass

        def on_finalize(sender=None, **_):
            _wrap_app(app)
        app.on_after_finalize.connect(on_finalize, sender=app, weak=False)

        def on_worker_init(sender=None, **_):
            if getattr(sender, "app", None) is app:
                _wrap_app(app)
        # Sent after the worker imported the task modules and before it
        # builds its tracers and forks its pool (prefork's children build
        # theirs from the classes they inherit).
        _signals.worker_init.connect(on_worker_init, weak=False)
        app._memlimits_connected = True
    _wrap_app(app)


def uninstall(app):
    """Remove :func:`install`'s limits from ``app``'s tasks (their runs
    from now on)."""
    app._memlimits_celery = None
