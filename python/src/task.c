/* memlimits._memlimits, the _Task type: an ml_task entered and left on
 * the calling thread (ml_task_enter / ml_task_leave) with FAIL delivery,
 * the with statement's two ends in C, and step() for memlimits.asgi
 * (stepper.c drives coroutines with the slices opened here). */
#include "module.h"

typedef struct {
	PyObject_HEAD ml_task *task;
	unsigned long long held_limit, alloc_limit;
} TaskObject;

int mlpy_parse_limit(PyObject *o, unsigned long long *out)
{
	if (o == Py_None) {
		*out = ML_NO_LIMIT;
		return 0;
	}
	unsigned long long v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = v;
	return 0;
}

static int task_init(PyObject *self_, PyObject *args, PyObject *kw)
{
	TaskObject *self = (TaskObject *)self_;
	static char *names[] = {"held", "alloc", "global_limit", "flag", NULL};
	PyObject *held = Py_None, *alloc = Py_None;
	int global = 0, flag = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOpp", names, &held,
	                                 &alloc, &global, &flag))
		return -1;
	if (self->task) {
		PyErr_SetString(PyExc_RuntimeError, "Task already initialised");
		return -1;
	}
	ml_limits l = ML_LIMITS_INIT;
	if (mlpy_parse_limit(held, &self->held_limit) ||
	    mlpy_parse_limit(alloc, &self->alloc_limit))
		return -1;
	l.held_bytes = self->held_limit;
	l.alloc_bytes = self->alloc_limit;
	l.global = global;
	l.delivery = flag ? ML_DELIVER_FLAG : ML_DELIVER_FAIL;
	self->task = ml_task_new(&l);
	if (!self->task) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

static void task_dealloc(PyObject *self_)
{
	TaskObject *self = (TaskObject *)self_;
	ml_task_free(self->task);
	PyTypeObject *tp = Py_TYPE(self_);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
	f(self_);
	Py_DECREF(tp);
}

/* A slice opened on this thread.  The outermost one starts the refusal
 * guard's byte budget again (guard.c): what a stopped block may keep past
 * its stop is counted from the thread's entry into its outermost block,
 * so that a block entered again and again inside it gets no more. */
#define STACK_MAX 64
static MLPY_TLS ml_task *stack[STACK_MAX]; /* stack[i]: the (i+1)th slice */
static MLPY_TLS uint64_t zombies;          /* bit i: stack[i]'s exit has run */
static void entered_now(ml_task *t)
{
	if (mlpy_entered < STACK_MAX) {
		stack[mlpy_entered] = t;
		zombies &= ~((uint64_t)1 << mlpy_entered);
	}
	if (mlpy_entered++ == 0)
		mlpy_grace = MLPY_GRACE_BYTES;
}
/* The innermost slice was left; the slices under it whose exit ran
 * already (leave_any could not leave them then) are left now. */
static void left_innermost(void)
{
	mlpy_entered--;
	while (mlpy_entered && mlpy_entered <= STACK_MAX &&
	       (zombies >> (mlpy_entered - 1) & 1)) {
		zombies &= ~((uint64_t)1 << (mlpy_entered - 1));
		if (ml_task_current() != stack[mlpy_entered - 1] ||
		    ml_task_leave(stack[mlpy_entered - 1]) < 0)
			break;
		mlpy_entered--;
	}
}

/* Leave t, which may be under other slices of this module on this thread:
 * a generator whose `with` was open across a yield, collected (its
 * GeneratorExit thrown in) inside another block.  The library leaves the
 * innermost slice only, and the generator's slice stayed on the thread
 * for good: outside every block, each allocation was then charged to it
 * (refused when it was stopped).  So the slices above it are left, t
 * is left, and they are entered again, innermost last, which leaves the
 * thread where it was without t.  When one of them is stopped (the
 * library enters no stopped task) nothing is moved: t is left as soon as
 * the slices above it are (left_innermost), and until then counts what
 * they count, as an outer block does.  t's status, or -1 with nothing
 * changed when t is not in the stack this module keeps (another
 * thread's, or deeper than STACK_MAX). */
static int leave_any(ml_task *t)
{
	int rc = ml_task_leave(t);
	if (rc >= 0) {
		left_innermost();
		return rc;
	}
	if (mlpy_entered > STACK_MAX || mlpy_entered < 2 ||
	    ml_task_current() != stack[mlpy_entered - 1])
		return rc;
	unsigned at = mlpy_entered - 1, top = mlpy_entered;
	while (at > 0 && stack[at - 1] != t)
		at--;
	if (at-- == 0)
		return -1;
	for (unsigned k = at + 1; k < top; k++)
		if (ml_task_status(stack[k]) != ML_OK) {
			zombies |= (uint64_t)1 << at;
			return ml_task_status(t);
		}
	unsigned left = top;
	while (left > at + 1 && ml_task_leave(stack[left - 1]) >= 0)
		left--;
	if (left == at + 1)
		rc = ml_task_leave(t);
	/* Entered again: all of them when one of the leaves failed (nothing
	 * changed then), those above t otherwise, each down one place. */
	unsigned to = rc >= 0 ? at : left;
	for (unsigned k = left; k < top; k++)
		if (ml_task_enter(stack[k]) == 0)
			stack[to++] = stack[k];
	mlpy_entered = to;
	return rc;
}

/* Enter the task on this thread, the module's wrappers checked first
 * (another hook may have replaced them): ml_task_enter's answer, the
 * slice counted when it opened. */
static int enter(TaskObject *self)
{
	return mlpy_slice_enter(self->task);
}

static int live(TaskObject *self)
{
	if (!self->task) {
		PyErr_SetString(PyExc_RuntimeError, "Task not initialised");
		return 0;
	}
	return 1;
}

/* For stepper.c: a Task's ml_task (NULL with TypeError or RuntimeError
 * set when o is none or not initialised), and a slice of it opened and
 * closed as enter() and task_step() do. */
ml_task *mlpy_task_handle(PyObject *o)
{
	if (!PyObject_TypeCheck(o, mlpy_task_type)) {
		PyErr_Format(PyExc_TypeError,
		             "task: a memlimits.Task, not %.100s",
		             Py_TYPE(o)->tp_name);
		return NULL;
	}
	TaskObject *self = (TaskObject *)o;
	return live(self) ? self->task : NULL;
}

int mlpy_slice_enter(ml_task *t)
{
	mlpy_wrap();
	int rc = ml_task_enter(t);
	if (rc == 0)
		entered_now(t);
	return rc;
}

void mlpy_slice_leave(ml_task *t)
{
	if (ml_task_leave(t) >= 0)
		left_innermost();
}

static PyObject *task_enter(PyObject *self_, PyObject *unused)
{
	(void)unused;
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	return PyLong_FromLong(enter(self));
}

static PyObject *task_leave(PyObject *self_, PyObject *unused)
{
	(void)unused;
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	int rc = ml_task_leave(self->task);
	if (rc >= 0)
		left_innermost();
	return PyLong_FromLong(rc);
}

/* The task of a live Task, or NULL with RuntimeError set. */
static ml_task *task_of(PyObject *self_)
{
	TaskObject *self = (TaskObject *)self_;
	return live(self) ? self->task : NULL;
}
static PyObject *task_status(PyObject *self_, void *c)
{
	(void)c;
	ml_task *t = task_of(self_);
	return t ? PyLong_FromLong(ml_task_status(t)) : NULL;
}
static PyObject *task_held(PyObject *self_, void *c)
{
	(void)c;
	ml_task *t = task_of(self_);
	return t ? PyLong_FromUnsignedLongLong(ml_task_held(t)) : NULL;
}
static PyObject *task_allocated(PyObject *self_, void *c)
{
	(void)c;
	ml_task *t = task_of(self_);
	return t ? PyLong_FromUnsignedLongLong(ml_task_allocated(t)) : NULL;
}
PyObject *mlpy_limit_value(unsigned long long v)
{
	if (v == ML_NO_LIMIT)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(v);
}
/* The ml_task's address: what _memlimits.current_task_id() returns on a
 * thread inside it (memlimits/__init__.py maps it back to the Task, for
 * the threads a block starts). */
static PyObject *task_id(PyObject *self_, void *c)
{
	(void)c;
	ml_task *t = task_of(self_);
	return t ? PyLong_FromVoidPtr(t) : NULL;
}
static PyObject *task_held_limit(PyObject *self_, void *c)
{
	(void)c;
	return mlpy_limit_value(((TaskObject *)self_)->held_limit);
}
static PyObject *task_alloc_limit(PyObject *self_, void *c)
{
	(void)c;
	return mlpy_limit_value(((TaskObject *)self_)->alloc_limit);
}
static PyObject *task_describe(PyObject *self_, PyObject *unused)
{
	(void)unused;
	TaskObject *self = (TaskObject *)self_;
	char buf[512];
	if (!live(self))
		return NULL;
	if (ml_task_describe(self->task, buf, sizeof buf) < 0)
		buf[0] = 0;
	return PyUnicode_FromString(buf);
}

/* The with statement's two ends are C, so that nothing between the block
 * and ml_task_leave allocates: inside a stopped block every allocation
 * fails, a Python-level __exit__ could fail before it left, and the
 * task would stay entered on the thread for good.  The exception to
 * raise is made by the subclass's _exceeded(code), after the leave. */
static PyObject *raise_exceeded(PyObject *self, int rc)
{
	PyObject *exc = PyObject_CallMethod(self, "_exceeded", "i", rc);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

static PyObject *task_cm_enter(PyObject *self_, PyObject *unused)
{
	(void)unused;
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	int rc = enter(self);
	if (rc > 0)
		return raise_exceeded(self_, rc);
	if (rc < 0) {
		PyErr_SetString(PyExc_RuntimeError,
		                "memlimits: this thread is inside this task "
		                "already");
		return NULL;
	}
	Py_INCREF(self_);
	return self_;
}

static PyObject *task_cm_exit(PyObject *self_, PyObject *const *args,
                              Py_ssize_t nargs)
{
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	int rc = leave_any(self->task);
	if (rc < 0) {
		PyErr_SetString(
		    PyExc_RuntimeError,
		    "memlimits: the task left is not this thread's "
		    "innermost (a block left open across a yield?)");
		return NULL;
	}
	if (rc == 0)
		Py_RETURN_FALSE;
	PyObject *et = nargs > 0 ? args[0] : Py_None;
	if (et != Py_None && PyType_Check(et) &&
	    (PyType_IsSubtype((PyTypeObject *)et,
	                      (PyTypeObject *)PyExc_KeyboardInterrupt) ||
	     PyType_IsSubtype((PyTypeObject *)et,
	                      (PyTypeObject *)PyExc_SystemExit) ||
	     PyType_IsSubtype((PyTypeObject *)et,
	                      (PyTypeObject *)PyExc_GeneratorExit)))
		Py_RETURN_FALSE;
	return raise_exceeded(self_, rc);
}

/* fn(*args) entered: one step of a coroutine (memlimits.asgi).  The
 * caller checks the status first: a stopped task is not entered (its
 * step runs as is, -1 from enter: nothing to leave). */
static PyObject *task_step(PyObject *self_, PyObject *const *args,
                           Py_ssize_t nargs)
{
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	if (nargs < 1) {
		PyErr_SetString(PyExc_TypeError, "step(fn, *args)");
		return NULL;
	}
	int rc = enter(self);
	PyObject *r =
	    PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), NULL);
	if (rc == 0 && ml_task_leave(self->task) >= 0)
		left_innermost();
	return r;
}

static PyMethodDef task_methods[] = {
    {"__enter__", task_cm_enter, METH_NOARGS,
     "Enter the task on this thread (a slice)."},
    {"__exit__", (PyCFunction)(void (*)(void))task_cm_exit, METH_FASTCALL,
     "Leave it; raise self._exceeded(code) when it was stopped."},
    {"step", (PyCFunction)(void (*)(void))task_step, METH_FASTCALL,
     "step(fn, *args): fn(*args) with the task entered on this thread."},
    {"enter", task_enter, METH_NOARGS,
     "enter() -> int: ml_task_enter on this thread; 0, a status > 0 when "
     "the task is stopped already, -1 when refused."},
    {"leave", task_leave, METH_NOARGS,
     "leave() -> int: ml_task_leave; the task's status, -1 when this "
     "thread's innermost slice is not this task's."},
    {"describe", task_describe, METH_NOARGS,
     "describe() -> str: ml_task_describe's line."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef task_getset[] = {
    {"status_code", task_status, NULL, "ml_task_status: 0 while it runs.",
     NULL},
    {"held", task_held, NULL, "Estimated bytes held now.", NULL},
    {"allocated", task_allocated, NULL, "Estimated bytes allocated so far.",
     NULL},
    {"held_limit", task_held_limit, NULL, "The held limit, or None.", NULL},
    {"task_id", task_id, NULL, "The ml_task's address (an int).", NULL},
    {"alloc_limit", task_alloc_limit, NULL, "The allocation limit, or None.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot task_slots[] = {
    {Py_tp_doc, "_Task(held=None, alloc=None, global_limit=False, "
                "flag=False): an ml_task with FAIL (or FLAG) delivery."},
    {Py_tp_init, task_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, task_dealloc},
    {Py_tp_methods, task_methods},
    {Py_tp_getset, task_getset},
    {0, NULL}};

PyType_Spec mlpy_task_spec = {"memlimits._memlimits._Task", sizeof(TaskObject),
                              0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                              task_slots};
