/* memlimits._memlimits: the C part of the Python module (issue 37).
 *
 * Two jobs:
 *  1. Every allocation of the interpreter reaches the library's sampler
 *     exactly once (install_hooks):
 *     - the RAW domain (malloc-like blocks, and pymalloc's blocks over
 *       512 bytes, which it takes from PyMem_RawMalloc) goes to the
 *       library's own malloc family: as under `memlimits run`, with held
 *       memory, the meter and FAIL refusals.  When the library is the
 *       process's allocator already (preloaded), the domain is left
 *       alone: it reaches the library through malloc.
 *     - the MEM and OBJ domains (pymalloc) are wrapped: a block carved
 *       from an arena is noted with ml_note_alloc_block after pymalloc
 *       made it (refused: freed again, NULL, so Python raises
 *       MemoryError), and ml_note_free_block when freed.  Its size is its
 *       size class, read from its pool's header (validated at start-up).
 *     - the arenas themselves come from raw mmap system calls
 *       (PyObject_SetArenaAllocator), which the library's mapped-memory
 *       counting does not see: objects count, arenas do not.  Aligned to
 *       1 MiB, so that a bitmap of arenas tells an arena's object from a
 *       RAW block in one load.
 *     The domains' wrappers go in at the first task entered or global
 *     limit set (wrap), not at import: a process that never sets a
 *     limit runs CPython's own allocators, with nothing in between (a
 *     wrapper, however cheap, costs CPython its inlined pymalloc: 6 %
 *     of CPU in bench-python.py).  Under the preload (run mode: the
 *     process is a task) they go in at import.
 *  2. Tasks: ml_task objects entered and left on the calling thread
 *     (ml_task_enter / ml_task_leave), with FAIL delivery.
 * The rest (sizes, the with blocks, the exceptions) is Python
 * (memlimits/__init__.py).
 *
 * This file is the module itself: its process-wide functions and its
 * initialisation.  The parts: hooks.c (the library's malloc family, the
 * RAW domain, putting the wrappers in), pymalloc.c (the arenas and the
 * MEM and OBJ domains' wrappers), guard.c (the refusal guard), task.c
 * (the _Task type), frames.c (Python's frames in the library's stacks);
 * module.h is what they share. */
#include "module.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/parse.h"

static PyObject *m_heap(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return PyLong_FromUnsignedLongLong(ml_global_memory_usage());
}
static PyObject *m_global_limit(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return mlpy_limit_value(ml_global_limit());
}
static PyObject *m_set_global_limit(PyObject *m, PyObject *arg)
{
	(void)m;
	unsigned long long v;
	if (mlpy_parse_limit(arg, &v))
		return NULL;
	/* The heap the limit reads counts objects from now on, on every
	 * thread. */
	unsigned long long was = ml_global_limit();
	int rc = ml_set_global_limit(v);
	if (rc == 0 && v != ML_NO_LIMIT)
		mlpy_wrap();
	/* The meter runs from now: the objects alive now were never
	 * counted, and their frees must not lower it (pymalloc.c). */
	if (rc == 0 && (was == ML_NO_LIMIT) != (v == ML_NO_LIMIT) &&
	    !mlpy_preloaded)
		mlpy_meter_started(v != ML_NO_LIMIT);
	if (rc == 0)
		mlpy_count_all = mlpy_preloaded || v != ML_NO_LIMIT;
	return PyLong_FromLong(rc);
}
static PyObject *m_write_metrics(PyObject *m, PyObject *arg)
{
	(void)m;
	int fd = PyObject_AsFileDescriptor(arg);
	if (fd < 0)
		return NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = ml_write_metrics(fd);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	Py_RETURN_NONE;
}
static PyObject *m_capabilities(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	unsigned c = ml_capabilities();
	/* extensions: how the other objects' malloc reaches the library, and
	 * how many objects' references do now (dlopen adds to them). */
	int patched = strcmp(mlpy_extensions, "patched") == 0
	                  ? ml_patch_objects(ML_PATCH_QUERY)
	                  : 0;
	return Py_BuildValue(
	    "{s:I,s:s,s:s,s:O,s:O,s:K,s:{s:s,s:i},s:O}", "mask", c, "counting",
	    mlpy_counting, "library", ml_version(), "preloaded",
	    mlpy_preloaded ? Py_True : Py_False, "wrapped",
	    mlpy_wrapped ? Py_True : Py_False, "interval",
	    (unsigned long long)ml_sample_interval(), "extensions", "mode",
	    mlpy_extensions, "patched", patched, "python_frames",
	    mlpy_frames_on ? Py_True : Py_False);
}
/* ml_set_stack_capture: stacks at samples, for held profiles. */
static PyObject *m_set_stack_capture(PyObject *m, PyObject *arg)
{
	(void)m;
	int on = PyObject_IsTrue(arg);
	if (on < 0)
		return NULL;
	if (ml_set_stack_capture(on) < 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	Py_RETURN_NONE;
}
/* What a task (None: every task) holds by call stack, as bytes of
 * collapsed-stack text (ml_write_held_profile, through a memfd: the
 * library writes to a descriptor). */
static PyObject *m_held_profile(PyObject *m, PyObject *arg)
{
	(void)m;
	ml_task *t = NULL;
	if (arg != Py_None && !(t = mlpy_task_handle(arg)))
		return NULL;
	int fd = memfd_create("memlimits-held-profile", MFD_CLOEXEC);
	if (fd < 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = ml_write_held_profile(t, fd);
	Py_END_ALLOW_THREADS
	off_t size = rc < 0 ? -1 : lseek(fd, 0, SEEK_CUR);
	PyObject *r = NULL;
	if (size >= 0 && (r = PyBytes_FromStringAndSize(NULL, size))) {
		char *b = PyBytes_AS_STRING(r);
		for (off_t at = 0; at < size;) {
			ssize_t k = pread(fd, b + at, (size_t)(size - at), at);
			if (k <= 0) {
				if (k < 0 && errno == EINTR)
					continue;
				Py_CLEAR(r);
				errno = k < 0 ? errno : EIO;
				break;
			}
			at += k;
		}
	}
	int saved = errno;
	close(fd);
	if (!r && !PyErr_Occurred()) {
		errno = saved;
		PyErr_SetFromErrno(PyExc_OSError);
	}
	return r;
}
/* A size as the memlimits command reads it: the library's one parser
 * (lib/util/parse.c, compiled into the module: memlimits_build.py), so that
 * "1.5G" means the same here and there.  A str in; its bytes, or ValueError. */
static PyObject *m_parse_size(PyObject *m, PyObject *arg)
{
	(void)m;
	Py_ssize_t n;
	const char *s =
	    PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, &n) : NULL;
	if (!s) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "a size string");
		return NULL;
	}
	uint64_t v;
	if ((size_t)n != strlen(s) || ml__parse_size(s, &v) != 0) {
		PyErr_SetString(PyExc_ValueError, "not a size");
		return NULL;
	}
	return PyLong_FromUnsignedLongLong(v);
}
/* ml_task_current's address on this thread, 0 outside tasks: the
 * innermost slice's task (memlimits/__init__.py: threads started inside
 * a block run inside its task). */
static PyObject *m_current_task_id(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return PyLong_FromVoidPtr(ml_task_current());
}
static PyObject *m_interrupted(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return PyBool_FromLong(ml_is_interrupted());
}

static PyMethodDef module_methods[] = {
    {"heap", m_heap, METH_NOARGS,
     "heap() -> int: the live heap bytes (ml_global_memory_usage)."},
    {"global_limit", m_global_limit, METH_NOARGS,
     "global_limit() -> int | None: the process's global memory limit."},
    {"set_global_limit", m_set_global_limit, METH_O,
     "set_global_limit(bytes | None) -> int: ml_set_global_limit."},
    {"write_metrics", m_write_metrics, METH_O,
     "write_metrics(file) -> None: Prometheus text to a file or fd."},
    {"capabilities", m_capabilities, METH_NOARGS,
     "capabilities() -> dict: ml_capabilities and how Python's allocations "
     "are counted (wrapped: the domains' wrappers are in, from the first "
     "limit on)."},
    {"current_task_id", m_current_task_id, METH_NOARGS,
     "current_task_id() -> int: ml_task_current()'s address, 0 for none."},
    {"parse_size", m_parse_size, METH_O,
     "parse_size(str) -> int: the library's size parser (ValueError)."},
    {"is_interrupted", m_interrupted, METH_NOARGS,
     "is_interrupted() -> bool: ml_is_interrupted."},
    {"set_stack_capture", m_set_stack_capture, METH_O,
     "set_stack_capture(bool) -> None: ml_set_stack_capture (OSError "
     "where no stack can be captured)."},
    {"held_profile", m_held_profile, METH_O,
     "held_profile(task | None) -> bytes: ml_write_held_profile's "
     "collapsed stacks."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject *TaskType;
PyTypeObject *mlpy_task_type;

static int module_exec(PyObject *m)
{
	if (!mlpy_hooked && mlpy_install_hooks() != 0)
		return -1;
	/* Python's frames in the stacks of samples (frames.c): read only
	 * while stack capture is on. */
	if (!mlpy_frames_on)
		mlpy_frames_install();
	TaskType = (PyTypeObject *)PyType_FromSpec(&mlpy_task_spec);
	if (!TaskType)
		return -1;
	if (PyModule_AddObject(m, "_Task", (PyObject *)TaskType) < 0) {
		Py_DECREF(TaskType);
		return -1;
	}
	Py_INCREF(TaskType);
	mlpy_task_type = TaskType;
	PyObject *stepper = PyType_FromSpec(&mlpy_stepper_spec);
	if (!stepper)
		return -1;
	if (PyModule_AddObject(m, "_Stepper", stepper) < 0) {
		Py_DECREF(stepper);
		return -1;
	}
	return 0;
}

/* Single-phase initialisation, on purpose: the hooks, the arena bitmap
 * and the wrappers' switch are the process's and assume one GIL, so an
 * interpreter with a GIL of its own (3.12 on) must refuse the module,
 * which CPython does for a module without Py_mod_multiple_interpreters
 * (ImportError: "does not support loading in subinterpreters"). */
static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_memlimits",
    "The C part of memlimits: the allocator hooks and ml_task objects.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL};

#ifndef ML_PY_VERSION
#define ML_PY_VERSION ML_VERSION_STRING
#endif

PyMODINIT_FUNC PyInit__memlimits(void)
{
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	/* The package's version, as memlimits_build.py found it
	 * (configure.ac's): memlimits.__version__. */
	if (module_exec(m) != 0 ||
	    PyModule_AddStringConstant(m, "__version__", ML_PY_VERSION) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
