"""A memory limit per cell in IPython and Jupyter kernels.

    %load_ext memlimits.ipython

    %%memlimit held=2GiB alloc=16GiB      # this cell
    rows = load_everything()

    %memlimit held=2GiB                   # each cell from the next one on
    %memlimit off                         # no more
    %memlimit                             # the setting and the last stop

A limited cell runs in a :class:`memlimits.Task` of its own.  Over its
limit, its next allocation fails and the cell ends with
:class:`memlimits.LimitExceeded`, shown as any exception a cell raises
(ename ``LimitExceeded`` in the kernel's reply), while the kernel keeps
its process and its variables.  What the cell's statements completed
before the stop stays done: a variable assigned by an earlier statement
of the cell keeps its value, a list that the stopped statement was
filling keeps what it had.

How: an AST transformer (``shell.ast_transformers``) puts each top-level
statement of a limited cell in ``with <the cell's task>:``, so that the
block covers exactly the cell's code, ``await`` included (IPython's
autoawait runs such a cell as a coroutine; the block stays entered
across its awaits, on the kernel's thread), and IPython's own work
around the statements (its traceback, the display of the result) runs
outside it.  A ``%%memlimit`` cell run another way (``run_cell_magic``
from code, or inside a cell that is already limited) runs its body in
a block from the magic itself, without top-level ``await``.

Limits nest as blocks do: a ``%%memlimit`` cell under ``%memlimit``
runs in both tasks, and the tighter limit stops it.  A limit is per
cell: what earlier cells keep is not counted, and threads started in a
cell run in its task (memlimits' rule), after the cell too."""

import ast
import itertools
import linecache
import shlex

from IPython.core.error import InputRejected, UsageError

from . import LimitExceeded, Task, _limit_size, _memlimits, _some_limit

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

_KEYS = ("held", "alloc", "global_limit")
_MAGIC = "memlimit"


def _parse(line, where="%memlimit"):
    """(held, alloc, global_limit) from "held=2GiB alloc=16GiB"; a
    UsageError naming the argument for anything else."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise UsageError("%s: %s in %r" % (where, e, line)) from None
    got = {}
    for w in words:
        key, eq, value = w.partition("=")
        if not eq:
            raise UsageError("%s: %r is not key=value (held=SIZE, "
                             "alloc=SIZE, global_limit=true)" % (where, w))
        if key not in _KEYS:
            raise UsageError("%s: unknown argument %r (held=, alloc=, "
                             "global_limit=)" % (where, key))
        if key in got:
            raise UsageError("%s: %s= given twice" % (where, key))
        got[key] = value
    glob = got.get("global_limit", "false").lower()
    if glob not in ("true", "false", "1", "0", "yes", "no"):
        raise UsageError("%s: global_limit=%r: true or false"
                         % (where, got["global_limit"]))
    glob = glob in ("true", "1", "yes")
    try:
        _some_limit(where, got.get("held"), got.get("alloc"), glob)
        held = _limit_size(got.get("held"), "held")
        alloc = _limit_size(got.get("alloc"), "alloc")
    except (ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    return held, alloc, glob


def _size(n):
    if n is None:
        return "none"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%.1f %s" % (n / (1 << shift), unit)
    return "%d B" % n


def _describe(lim):
    held, alloc, glob = lim
    out = "held %s, alloc %s" % (_size(held), _size(alloc))
    if glob:
        out += ", a candidate of the global limit"
    return out


class _State:
    def __init__(self, shell):
        self.shell = shell
        self.each = None          # (held, alloc, global_limit) or None
        self.stop = None          # (cell number, LimitExceeded)
        # The tasks of the cells that run or ran last, by the number the
        # transformed code names them with (an AST holds no objects).
        self.tasks = {}
        self.cells = {}           # task number -> cell number
        self.ids = itertools.count(1)

    def new_task(self, lim):
        t = Task(held=lim[0], alloc=lim[1], global_limit=lim[2])
        n = next(self.ids)
        self.tasks[n] = t
        self.cells[n] = self.shell.execution_count
        return n

    def harvest(self):
        """Record the last stop among the tasks kept, and forget those
        that ran (called where no cell of ours runs)."""
        for n in sorted(self.tasks):
            t = self.tasks[n]
            if t.status is not None:
                self.stop = (self.cells[n], t._exceeded(t.status_code))
        self.tasks.clear()
        self.cells.clear()

    def inside(self):
        cur = _memlimits.current_task_id()
        return cur != 0 and any(t.task_id == cur
                                for t in self.tasks.values())


_state = None
_value = None


def _cell(n):
    """The task numbered n, for the ``with`` of a transformed statement."""
    return _state.tasks[n]


def _take():
    """The value of a limited cell's last expression, computed inside its
    block, handed to IPython's display outside it."""
    global _value
    v, _value = _value, None
    return v


def _mod_attr(name, ctx):
    # __import__ (a builtin) rather than a name in the user's namespace,
    # which %reset or the cell itself may clear.
    imp = ast.Call(func=ast.Name(id="__import__", ctx=ast.Load()),
                   args=[ast.Constant(value="memlimits.ipython")],
                   keywords=[])
    mod = ast.Attribute(value=imp, attr="ipython", ctx=ast.Load())
    return ast.Attribute(value=mod, attr=name, ctx=ctx)


def _wrap(body, ids):
    """Each statement of body in ``with`` the tasks numbered ids (outer
    first), the last expression's value displayed outside the block."""
    out = []
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            out.append(stmt)      # must stay first, and allocates nothing
            continue
        items = [ast.withitem(
            context_expr=ast.Call(func=_mod_attr("_cell", ast.Load()),
                                  args=[ast.Constant(value=n)], keywords=[]),
            optional_vars=None) for n in ids]
        last_expr = i == len(body) - 1 and isinstance(stmt, ast.Expr)
        inner = stmt
        if last_expr:
            inner = ast.Assign(targets=[_mod_attr("_value", ast.Store())],
                               value=stmt.value)
        # The new nodes take the statement's place in the cell (what a
        # traceback shows); fix_missing_locations gives their parts the same.
        out.append(ast.copy_location(
            ast.With(items=items, body=[inner], type_comment=None), stmt))
        if last_expr:
            out.append(ast.copy_location(ast.Expr(value=ast.Call(
                func=_mod_attr("_take", ast.Load()), args=[], keywords=[])),
                stmt))
    return out


def _cell_magic_call(tree):
    # What IPython makes of a cell that starts with %%memlimit:
    # get_ipython().run_cell_magic('memlimit', LINE, BODY).
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not (isinstance(call, ast.Call) and
            isinstance(call.func, ast.Attribute) and
            call.func.attr == "run_cell_magic" and
            isinstance(call.func.value, ast.Call) and
            isinstance(call.func.value.func, ast.Name) and
            call.func.value.func.id == "get_ipython" and
            len(call.args) == 3 and not call.keywords and
            all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                for a in call.args) and
            call.args[0].value == _MAGIC):
        return None
    return call.args[1].value, call.args[2].value


def _show_body(line, body, src):
    # IPython caches the transformed cell for its tracebacks (linecache,
    # under the cell's name): for a %%memlimit cell that is one line, the
    # magic's call, which the body's line numbers do not point into (its
    # traceback formatter failed on it: "Unexpected exception formatting
    # exception").  The cached lines become the body as it runs, under a
    # comment in place of the magic's line.
    cached = ["get_ipython().run_cell_magic(%r, %r, %r)\n"
              % (_MAGIC, line, body)]
    lines = ["# %%%%%s %s\n" % (_MAGIC, line)] + src.splitlines(True)
    # IPython keeps its entries in linecache._ipython_cache too, and puts
    # them back from there whenever linecache.checkcache runs.
    caches = [linecache.cache, getattr(linecache, "_ipython_cache", {})]
    for cache in caches:
        for name, entry in list(cache.items()):
            if len(entry) == 4 and entry[2] == cached:
                cache[name] = (len("".join(lines)), entry[1], lines,
                               entry[3])


class _Transformer(ast.NodeTransformer):
    """Puts a limited cell's statements in its blocks (shell.ast_transformers
    calls visit with each cell's module, before it is compiled)."""

    def visit(self, tree):
        st = _state
        if st is None or not isinstance(tree, ast.Module) or st.inside():
            # A module of code already in a limited cell (%%time's body,
            # a run_cell from inside one) is covered by its block.
            return tree
        if _memlimits.current_task_id() == 0:
            st.harvest()
        magic = _cell_magic_call(tree)
        cell_lim = None
        if magic is not None:
            try:
                cell_lim = _parse(magic[0], "%%memlimit")
            except UsageError:
                # Left as it is: the magic itself raises the UsageError,
                # and the body does not run.
                magic = None
        try:
            body = tree.body
            if cell_lim is not None:
                try:
                    src = st.shell.transform_cell(magic[1])
                    inner = st.shell.compile.ast_parse(src)
                except SyntaxError:
                    # Left to the magic, which compiles the body again
                    # and raises it as the cell's error.
                    cell_lim = None
                else:
                    # The body starts on the cell's second line, which is
                    # what IPython's traceback of the cell shows.
                    ast.increment_lineno(inner, 1)
                    body = inner.body
                    _show_body(magic[0], magic[1], src)
            if st.each is None and cell_lim is None:
                return tree
            ids = []
            if st.each is not None:
                ids.append(st.new_task(st.each))
            if cell_lim is not None:
                ids.append(st.new_task(cell_lim))
            tree.body = _wrap(body, ids)
            return ast.fix_missing_locations(tree)
        except Exception as e:
            # Not run unlimited, and not unregistered by IPython (which
            # drops a transformer that raises anything else).
            raise InputRejected("memlimit: could not limit the cell: %r"
                                % (e,)) from e


def _run_body(st, lim, cell):
    # %%memlimit run as a function (run_cell_magic from code, or inside a
    # limited cell): the body in a block, its last expression returned for
    # display, as %%time runs its cell.
    shell = st.shell
    n = st.new_task(lim)
    with st.tasks[n]:
        tree = shell.compile.ast_parse(shell.transform_cell(cell))
        tree = shell.transform_ast(tree)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        ns = shell.user_ns
        exec(shell.compile(tree, "<memlimit cell>", "exec"), ns, ns)
        if last is not None:
            return eval(shell.compile(last, "<memlimit cell>", "eval"),
                        ns, ns)
    return None


def _status(st):
    lines = ["memlimit: each cell: %s" % (
        _describe(st.each) if st.each else "off")]
    if not st.inside():
        st.harvest()
    if st.stop is not None:
        cell, e = st.stop
        lines.append("memlimit: last stop: cell [%s]: %s at %s (held %s, "
                     "allocated %s)" % (cell, e.reason, _size(e.limit),
                                        _size(e.held), _size(e.allocated)))
    print("\n".join(lines))


def memlimit(line, cell=None):
    """%memlimit held=SIZE alloc=SIZE: a limit for each cell from the next
    one on; %memlimit off: none; %memlimit: the setting and the last stop.
    %%memlimit held=SIZE alloc=SIZE: a limit for this cell.

    Sizes as for memlimits.limit ("64MiB", "1.5G", bytes); at least one of
    held= and alloc= (or global_limit=true).  Over its limit the cell
    raises memlimits.LimitExceeded and the kernel carries on."""
    st = _state
    if cell is not None:
        return _run_body(st, _parse(line, "%%memlimit"), cell)
    words = line.split()
    if not words:
        _status(st)
    elif words == ["off"]:
        st.each = None
        print("memlimit: each cell: off")
    else:
        st.each = _parse(line)
        print("memlimit: each cell from the next one: %s"
              % _describe(st.each))


def _async_body(shell, cell):
    """Whether cell is a %%memlimit cell whose body awaits at its top
    level."""
    try:
        magic = _cell_magic_call(ast.parse(cell))
        if magic is None:
            return False
        body = shell.transform_cell(magic[1])
        return bool(shell.should_run_async.__wrapped__(
            magic[1], transformed_cell=body))
    except Exception:
        # Not a cell this can read: IPython's own answer stands.
        return False


def _wrap_should_run_async(shell):
    # IPython (and ipykernel) decide whether a cell runs as a coroutine
    # from its transformed text, which for a %%memlimit cell is the
    # magic's call and never awaits: its body's top-level await then ran
    # under IPython's pseudo-synchronous runner, which refuses it ("needs
    # a real async loop").  The body's answer counts too.
    orig = shell.should_run_async

    def should_run_async(raw_cell, **kw):
        if orig(raw_cell, **kw):
            return True
        return _async_body(shell, kw.get("transformed_cell") or raw_cell)
    should_run_async.__wrapped__ = orig
    should_run_async._memlimits = True
    shell.should_run_async = should_run_async


def load_ipython_extension(ip):
    """%load_ext memlimits.ipython: the %memlimit and %%memlimit magics."""
    global _state
    if _state is not None and _state.shell is ip:
        return
    if _state is not None:
        unload_ipython_extension(_state.shell)
    _state = _State(ip)
    ip.register_magic_function(memlimit, magic_kind="line_cell",
                               magic_name=_MAGIC)
    ip.ast_transformers.append(_Transformer())
    _wrap_should_run_async(ip)


def unload_ipython_extension(ip):
    """%unload_ext memlimits.ipython: the magics and the limits go."""
    global _state
    ip.ast_transformers[:] = [t for t in ip.ast_transformers
                              if not isinstance(t, _Transformer)]
    mine = ip.__dict__.get("should_run_async")
    if getattr(mine, "_memlimits", False):
        # The instance's attribute goes, and the class's method shows.
        del ip.should_run_async
    for kind in ("line", "cell"):
        ip.magics_manager.magics[kind].pop(_MAGIC, None)
    if _state is not None and _state.shell is ip:
        _state = None
