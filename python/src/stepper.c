/* memlimits._memlimits, the _Stepper type: a coroutine driven one step
 * at a time, each step a slice of its task (memlimits.asgi). */
#include "module.h"

/* In C because it runs at every await of every request: the Python class
 * it replaces cost an ASGI request of a small JSON endpoint some 4 % of
 * its instructions (make bench-python --requests).  The rules are the
 * Python class's, which docs/python.md gives: a step of a stopped task is
 * not run, LimitExceeded (the task's _exceeded(code)) is thrown into the
 * coroutine instead, so that it unwinds; a bridge's coroutine (made while
 * its task was stopped already) runs its first step outside the task. */

typedef struct {
	PyObject_HEAD PyObject *coro;
	PyObject *task;  /* the memlimits.Task, kept alive */
	ml_task *handle; /* its ml_task */
	int bridge;
} StepperObject;

static int stepper_init(PyObject *self_, PyObject *args, PyObject *kw)
{
	StepperObject *self = (StepperObject *)self_;
	static char *names[] = {"coro", "task", "bridge", NULL};
	PyObject *coro, *task;
	int bridge = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p", names, &coro, &task,
	                                 &bridge))
		return -1;
	ml_task *handle = mlpy_task_handle(task);
	if (!handle)
		return -1;
	Py_INCREF(coro);
	Py_INCREF(task);
	Py_XSETREF(self->coro, coro);
	Py_XSETREF(self->task, task);
	self->handle = handle;
	self->bridge = bridge;
	return 0;
}

static int stepper_traverse(PyObject *self_, visitproc visit, void *arg)
{
	StepperObject *self = (StepperObject *)self_;
	Py_VISIT(self->coro);
	Py_VISIT(self->task);
	Py_VISIT(Py_TYPE(self_)); /* a heap type's instance holds it */
	return 0;
}

static int stepper_clear(PyObject *self_)
{
	StepperObject *self = (StepperObject *)self_;
	Py_CLEAR(self->coro);
	Py_CLEAR(self->task);
	return 0;
}

static void stepper_dealloc(PyObject *self_)
{
	PyTypeObject *tp = Py_TYPE(self_);
	PyObject_GC_UnTrack(self_);
	stepper_clear(self_);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
	f(self_);
	Py_DECREF(tp);
}

static int stepper_live(StepperObject *self)
{
	if (!self->coro) {
		PyErr_SetString(PyExc_RuntimeError, "_Stepper not initialised");
		return 0;
	}
	return 1;
}

/* coro.send(value): its result, or NULL with StopIteration(value) set
 * when the coroutine returned (an iterator's end, as a generator's send
 * says it). */
static PyObject *coro_send(PyObject *coro, PyObject *value)
{
#if PY_VERSION_HEX >= 0x030A0000
	PyObject *res = NULL;
	PySendResult k = PyIter_Send(coro, value, &res);
	if (k == PYGEN_NEXT)
		return res;
	if (k == PYGEN_RETURN) {
		if (res == Py_None) {
			PyErr_SetNone(PyExc_StopIteration);
		} else {
			PyObject *e =
			    PyObject_CallOneArg(PyExc_StopIteration, res);
			if (e) {
				PyErr_SetObject(PyExc_StopIteration, e);
				Py_DECREF(e);
			}
		}
		Py_DECREF(res);
	}
	return NULL;
#else
	return PyObject_CallMethod(coro, "send", "O", value);
#endif
}

/* coro.throw(*args). */
static PyObject *coro_throw(PyObject *coro, PyObject *args)
{
	PyObject *throw = PyObject_GetAttrString(coro, "throw");
	if (!throw)
		return NULL;
	PyObject *r = PyObject_Call(throw, args, NULL);
	Py_DECREF(throw);
	return r;
}

/* One step: value sent (args NULL) or args thrown into the coroutine, in
 * a slice of the task; a stopped task's step is its LimitExceeded thrown
 * in, outside the task. */
static PyObject *stepper_step(StepperObject *self, PyObject *value,
                              PyObject *args)
{
	if (!stepper_live(self))
		return NULL;
	int code = ml_task_status(self->handle);
	if (code > 0) {
		if (self->bridge) {
			self->bridge = 0;
			return args ? coro_throw(self->coro, args)
			            : coro_send(self->coro, value);
		}
		PyObject *exc =
		    PyObject_CallMethod(self->task, "_exceeded", "i", code);
		if (!exc)
			return NULL;
		PyObject *a = PyTuple_Pack(1, exc);
		Py_DECREF(exc);
		if (!a)
			return NULL;
		PyObject *r = coro_throw(self->coro, a);
		Py_DECREF(a);
		return r;
	}
	/* Entered and left here: nothing allocates after a stop before the
	 * leave.  A refused entry (-1: this thread is in the task already)
	 * runs the step as it is, in the slice open here, as step() does. */
	int rc = mlpy_slice_enter(self->handle);
	PyObject *r =
	    args ? coro_throw(self->coro, args) : coro_send(self->coro, value);
	if (rc == 0)
		mlpy_slice_leave(self->handle);
	return r;
}

static PyObject *stepper_iternext(PyObject *self_)
{
	PyObject *r = stepper_step((StepperObject *)self_, Py_None, NULL);
	/* An iterator ends with NULL and StopIteration set, or none: the
	 * value of a StopIteration is the await's result, kept as it is. */
	return r;
}

static PyObject *stepper_send(PyObject *self_, PyObject *value)
{
	return stepper_step((StepperObject *)self_, value, NULL);
}

static PyObject *stepper_throw(PyObject *self_, PyObject *args)
{
	return stepper_step((StepperObject *)self_, NULL, args);
}

static PyObject *stepper_close(PyObject *self_, PyObject *unused)
{
	(void)unused;
	StepperObject *self = (StepperObject *)self_;
	if (!stepper_live(self))
		return NULL;
	return PyObject_CallMethod(self->coro, "close", NULL);
}

static PyObject *stepper_self(PyObject *self_)
{
	Py_INCREF(self_);
	return self_;
}

static PyMethodDef stepper_methods[] = {
    {"send", stepper_send, METH_O, "send(value): one step, value sent in."},
    {"throw", stepper_throw, METH_VARARGS,
     "throw(*exc): one step, exc thrown in."},
    {"close", stepper_close, METH_NOARGS, "close(): the coroutine's close()."},
    {NULL, NULL, 0, NULL}};

static PyType_Slot stepper_slots[] = {
    {Py_tp_doc, "_Stepper(coro, task, bridge=False): an awaitable that runs "
                "coro with each of its steps a slice of task."},
    {Py_tp_init, stepper_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, stepper_dealloc},
    {Py_tp_traverse, stepper_traverse},
    {Py_tp_clear, stepper_clear},
    {Py_tp_iter, stepper_self},
    {Py_tp_iternext, stepper_iternext},
    {Py_am_await, stepper_self},
    {Py_tp_methods, stepper_methods},
    {0, NULL}};

PyType_Spec mlpy_stepper_spec = {
    "memlimits._memlimits._Stepper", sizeof(StepperObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, stepper_slots};
