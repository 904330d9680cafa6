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
 * (memlimits/__init__.py). */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>

#include <dlfcn.h>
#include <memlimits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- The library's malloc family ------------------------------------ */

static void *(*lib_malloc)(size_t);
static void *(*lib_calloc)(size_t, size_t);
static void *(*lib_realloc)(void *, size_t);
static void (*lib_free)(void *);
static int preloaded; /* the library is the process's malloc */
static int hooked;    /* the domains are ours */
static const char *counting = "off";

static int find_library_family(void)
{
	Dl_info info;
	if (!dladdr((void *)ml_version, &info) || !info.dli_fname)
		return -1;
	void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return -1;
	lib_malloc = (void *(*)(size_t))dlsym(h, "malloc");
	lib_calloc = (void *(*)(size_t, size_t))dlsym(h, "calloc");
	lib_realloc = (void *(*)(void *, size_t))dlsym(h, "realloc");
	lib_free = (void (*)(void *))dlsym(h, "free");
	void *global = dlsym(RTLD_DEFAULT, "malloc");
	dlclose(h);
	if (!lib_malloc || !lib_calloc || !lib_realloc || !lib_free)
		return -1;
	preloaded = global == (void *)lib_malloc ||
	            (ml_capabilities() & ML_CAP_INTERPOSED);
	return 0;
}

/* PyMem's RAW contract: never NULL for 0 bytes. */
static void *raw_malloc(void *ctx, size_t n)
{
	(void)ctx;
	return lib_malloc(n ? n : 1);
}
static void *raw_calloc(void *ctx, size_t a, size_t b)
{
	(void)ctx;
	if (a == 0 || b == 0)
		a = b = 1;
	return lib_calloc(a, b);
}
static void *raw_realloc(void *ctx, void *p, size_t n)
{
	(void)ctx;
	return lib_realloc(p, n ? n : 1);
}
static void raw_free(void *ctx, void *p)
{
	(void)ctx;
	lib_free(p);
}

/* ---- Arenas: raw mappings, in granules of 256 KiB, in a bitmap ---------
 *
 * A granule is ours whole or not at all, so that no other mapping (a
 * large RAW block) is ever taken for an arena.  256 KiB: Debian's 3.11
 * makes its arenas that size (ARENA_SIZE; 1 MiB with other build
 * options, also whole granules). */

#define ARENA_BITS 18
#define POOL_BITS 14      /* CPython 3.10+ with the radix tree: 16 KiB */
#define POOL_SZIDX_OFF 36 /* struct pool_header's szidx (obmalloc.c) */
#define ALIGN_SHIFT 4
static uint8_t *arena_map; /* a bit per granule of a 47-bit space */
static int class_ok;       /* the pool header reads as validated */

static void *sys_mmap(size_t n)
{
	long r = syscall(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return r == -1 ? NULL : (void *)r;
}
static void sys_munmap(void *p, size_t n)
{
	syscall(SYS_munmap, p, n);
}

static inline int in_arena(const void *p)
{
	uintptr_t m = (uintptr_t)p >> ARENA_BITS;
	if (m >> (47 - ARENA_BITS))
		return 0;
	return (arena_map[m >> 3] >> (m & 7)) & 1;
}
static void arena_mark(void *p, size_t n, int on)
{
	for (uintptr_t m = (uintptr_t)p >> ARENA_BITS;
	     m < ((uintptr_t)p + n + (1u << ARENA_BITS) - 1) >> ARENA_BITS;
	     m++) {
		if (on)
			arena_map[m >> 3] |= (uint8_t)(1u << (m & 7));
		else
			arena_map[m >> 3] &= (uint8_t) ~(1u << (m & 7));
	}
}

static void *arena_alloc(void *ctx, size_t n)
{
	(void)ctx;
	size_t a = (size_t)1 << ARENA_BITS;
	size_t whole = (n + a - 1) & ~(a - 1);
	char *m = sys_mmap(whole + a);
	if (!m)
		return NULL;
	char *p = (char *)(((uintptr_t)m + a - 1) & ~(uintptr_t)(a - 1));
	if (p > m)
		sys_munmap(m, (size_t)(p - m));
	if (p + whole < m + whole + a)
		sys_munmap(p + whole, (size_t)(m + whole + a - (p + whole)));
	if ((uintptr_t)p >> 47) {
		sys_munmap(p, whole);
		return NULL;
	}
	arena_mark(p, whole, 1);
	return p;
}
static void arena_free(void *ctx, void *p, size_t n)
{
	(void)ctx;
	size_t a = (size_t)1 << ARENA_BITS;
	size_t whole = (n + a - 1) & ~(a - 1);
	/* An arena made before the module was imported (pymalloc's own
	 * mmap): exactly what it mapped. */
	if (!in_arena(p)) {
		sys_munmap(p, n);
		return;
	}
	arena_mark(p, whole, 0);
	sys_munmap(p, whole);
}

/* The size class of a block in one of our arenas. */
static inline size_t block_class(const void *p)
{
	uintptr_t pool = (uintptr_t)p & ~(((uintptr_t)1 << POOL_BITS) - 1);
	unsigned szidx = *(const unsigned *)(pool + POOL_SZIDX_OFF);
	return ((size_t)szidx + 1) << ALIGN_SHIFT;
}

/* ---- The MEM and OBJ domains: pymalloc, wrapped ------------------------ */

static PyMemAllocatorEx prev_mem, prev_obj, prev_raw;

/* Objects are noted where something reads them: on a thread inside a
 * task of this module (`entered`, its slices open here), or everywhere
 * while a global limit is set or under the preload (`count_all`: the
 * heap, run mode's process task).  Elsewhere an allocation is
 * CPython's alone after one test: no task would be charged, and the
 * sampler's Poisson process over the bytes it does see stays one
 * (memorylessness).  Frees are always noted: a block allocated inside a
 * task may be held and freed anywhere. */
static __thread __attribute__((tls_model("initial-exec"))) unsigned entered;
static int count_all;

static inline int noting(void)
{
	return entered || count_all;
}

/* Inside a wrapper of the MEM or OBJ domain on this thread, noting: a
 * refusal now is of the interpreter's own allocation, which the refusal
 * guard may let through.  Under the preload a C library's malloc (lxml's
 * libxml2, PIL) is refused too, and gets no such grace: libxml2 goes on
 * after a NULL, and 256 allocations granted after each refusal let a
 * billion laughs reach 1.2 GB under a 64 MiB limit.  Without the preload
 * the library sees the domains' blocks only: the wrappers that mark
 * (MARK 1) go in under the preload alone, as the mark costs the regex
 * loop 1.3 points inside a block. */
static __thread __attribute__((tls_model("initial-exec"))) unsigned in_python;

static inline void *noted(PyMemAllocatorEx *prev, void *p)
{
	if (p && in_arena(p) && !ml_note_alloc_block(p, block_class(p))) {
		prev->free(prev->ctx, p);
		return NULL;
	}
	return p;
}
static inline void *pm_malloc_(void *ctx, size_t n, unsigned mark)
{
	PyMemAllocatorEx *prev = ctx;
	if (!noting())
		return prev->malloc(prev->ctx, n);
	in_python += mark;
	void *p = noted(prev, prev->malloc(prev->ctx, n));
	in_python -= mark;
	return p;
}
static inline void *pm_calloc_(void *ctx, size_t a, size_t b, unsigned mark)
{
	PyMemAllocatorEx *prev = ctx;
	if (!noting())
		return prev->calloc(prev->ctx, a, b);
	in_python += mark;
	void *p = noted(prev, prev->calloc(prev->ctx, a, b));
	in_python -= mark;
	return p;
}
static inline void *pm_realloc_(void *ctx, void *p, size_t n, unsigned mark)
{
	PyMemAllocatorEx *prev = ctx;
	size_t old = p && in_arena(p) ? block_class(p) : 0;
	int on = noting();
	mark &= (unsigned)on;
	in_python += mark;
	void *q = prev->realloc(prev->ctx, p, n);
	in_python -= mark;
	if (!q || (q == p && old))
		return q; /* failed, or in place in its pool: same class */
	if (old)
		ml_note_free_block(p, old);
	/* Moved into an arena: the old block is gone already, so a refusal
	 * cannot be undone; it counts nothing (ml_note_alloc_block). */
	if (on && in_arena(q))
		(void)ml_note_alloc_block(q, block_class(q));
	return q;
}
#define MARK_VARIANTS(suffix, mark)                                   \
	static void *pm_malloc##suffix(void *ctx, size_t n)           \
	{                                                             \
		return pm_malloc_(ctx, n, mark);                      \
	}                                                             \
	static void *pm_calloc##suffix(void *ctx, size_t a, size_t b) \
	{                                                             \
		return pm_calloc_(ctx, a, b, mark);                   \
	}                                                             \
	static void *pm_realloc##suffix(void *ctx, void *p, size_t n) \
	{                                                             \
		return pm_realloc_(ctx, p, n, mark);                  \
	}
MARK_VARIANTS(, 0)
MARK_VARIANTS(_marking, 1)
static void pm_free(void *ctx, void *p)
{
	PyMemAllocatorEx *prev = ctx;
	if (p && in_arena(p))
		ml_note_free_block(p, block_class(p));
	prev->free(prev->ctx, p);
}

/* The pool header is read as CPython 3.10 to 3.13 lay it out: checked on
 * blocks of every size class before any hook goes in. */
static int validate_classes(void)
{
	for (size_t n = 1; n <= 512; n += 3) {
		void *p = PyObject_Malloc(n);
		if (!p)
			return -1;
		size_t c = block_class(p);
		PyObject_Free(p);
		if (c < n || c - n >= ((size_t)1 << ALIGN_SHIFT))
			return -1;
	}
	return 0;
}

static bool refusal_guard(void *arg);

/* The domains' wrappers, from the first limit on (never taken out: a
 * block noted as held must be seen when it is freed).  Under the GIL,
 * which every MEM and OBJ call holds, so that none runs while they
 * change.  Blocks made before are pymalloc's and glibc's own: pm_free
 * and the library's free take them (no record: nothing held to give
 * back), as they take arenas' objects made before the import. */
static int wrapped;

static void wrap(void)
{
	if (wrapped || !hooked)
		return;
	wrapped = 1;
	PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &prev_mem);
	PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &prev_obj);
	PyMemAllocatorEx mem = {&prev_mem, pm_malloc, pm_calloc, pm_realloc,
	                        pm_free};
	if (preloaded) {
		mem.malloc = pm_malloc_marking;
		mem.calloc = pm_calloc_marking;
		mem.realloc = pm_realloc_marking;
	}
	PyMemAllocatorEx obj = mem;
	obj.ctx = &prev_obj;
	PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &mem);
	PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &obj);
	if (!preloaded) {
		/* RAW runs without the GIL too: a call that reads the domain
		 * while it changes gets glibc's function or the library's,
		 * either with a NULL context, and each frees what the other
		 * made (the library's family forwards to glibc). */
		PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &prev_raw);
		PyMemAllocatorEx raw = {NULL, raw_malloc, raw_calloc,
		                        raw_realloc, raw_free};
		PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &raw);
	}
}

static int install_hooks(void)
{
	const char *pm = getenv("PYTHONMALLOC");
	if (pm && *pm && strcmp(pm, "pymalloc") != 0) {
		counting = "off: PYTHONMALLOC is set";
		return 0;
	}
	if (find_library_family() != 0) {
		counting = "off: the library's malloc was not found";
		return 0;
	}
	if (validate_classes() != 0) {
		counting = "off: pymalloc's pools are not laid out as expected";
		return 0;
	}
	class_ok = 1;
	arena_map = sys_mmap((size_t)1 << (47 - ARENA_BITS - 3));
	if (!arena_map) {
		counting = "off: no memory for the arena map";
		return 0;
	}
	/* The arenas are ours from the import on, so that objects in the
	 * arenas pymalloc makes before the first limit count from then. */
	PyObjectArenaAllocator arenas = {NULL, arena_alloc, arena_free};
	PyObject_SetArenaAllocator(&arenas);
	counting = preloaded ? "preloaded" : "hooks";
	ml_set_refusal_guard(refusal_guard, NULL);
	hooked = 1;
	if (preloaded) {
		count_all = 1;
		wrap();
	}
	return 0;
}

/* ---- The refusal guard -------------------------------------------------
 *
 * FAIL delivery refuses every allocation of a stopped block until it is
 * left.  The interpreter cannot unwind that way: raising needs a
 * traceback object per frame, chaining and except clauses allocate, and
 * a refused allocation there raises again from the same handler (an
 * endless loop, seen in CPython 3.11).  So an allocation made while an
 * exception is propagating on this thread (the thread state's current
 * exception is set) goes through: the block's own code still gets its
 * MemoryError at its next allocation, and unwinding reaches the with
 * statement's C exit, which leaves.  Reads the thread's state without
 * the GIL's help (the RAW domain runs without it): NULL is no thread. */
/* After a refusal, the next GRACE allocations of the thread go through
 * (then the next is refused again): CPython normalizes an exception with
 * the current one fetched (cleared), and dies ("Cannot recover from
 * MemoryErrors while normalizing exceptions", seen under make check)
 * when that keeps failing.  A runaway that catches MemoryError and goes
 * on is refused again after GRACE allocations. */
#define GRACE 256
static __thread __attribute__((tls_model("initial-exec"))) unsigned grace;

static bool refusal_guard(void *arg)
{
	(void)arg;
	/* Without the preload the library sees only the domains' blocks. */
	if (preloaded && !in_python)
		return true;
	PyThreadState *ts = _PyThreadState_UncheckedGet();
	if (ts && ts->curexc_type)
		return false;
	if (grace) {
		grace--;
		return false;
	}
	grace = GRACE;
	return true;
}

/* ---- Tasks ------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD ml_task *task;
	unsigned long long held_limit, alloc_limit;
} TaskObject;

static PyTypeObject *TaskType;

static int parse_limit(PyObject *o, unsigned long long *out)
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
	if (parse_limit(held, &self->held_limit) ||
	    parse_limit(alloc, &self->alloc_limit))
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

static int live(TaskObject *self)
{
	if (!self->task) {
		PyErr_SetString(PyExc_RuntimeError, "Task not initialised");
		return 0;
	}
	return 1;
}

static PyObject *task_enter(PyObject *self_, PyObject *unused)
{
	(void)unused;
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	wrap();
	int rc = ml_task_enter(self->task);
	if (rc == 0)
		entered++;
	return PyLong_FromLong(rc);
}

static PyObject *task_leave(PyObject *self_, PyObject *unused)
{
	(void)unused;
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	int rc = ml_task_leave(self->task);
	if (rc >= 0)
		entered--;
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
static PyObject *limit_value(unsigned long long v)
{
	if (v == ML_NO_LIMIT)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(v);
}
static PyObject *task_held_limit(PyObject *self_, void *c)
{
	(void)c;
	return limit_value(((TaskObject *)self_)->held_limit);
}
static PyObject *task_alloc_limit(PyObject *self_, void *c)
{
	(void)c;
	return limit_value(((TaskObject *)self_)->alloc_limit);
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
	wrap();
	int rc = ml_task_enter(self->task);
	if (rc > 0)
		return raise_exceeded(self_, rc);
	if (rc < 0) {
		PyErr_SetString(PyExc_RuntimeError,
		                "memlimits: this thread is inside this task "
		                "already");
		return NULL;
	}
	entered++;
	Py_INCREF(self_);
	return self_;
}

static PyObject *task_cm_exit(PyObject *self_, PyObject *const *args,
                              Py_ssize_t nargs)
{
	TaskObject *self = (TaskObject *)self_;
	if (!live(self))
		return NULL;
	int rc = ml_task_leave(self->task);
	if (rc >= 0)
		entered--;
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
	wrap();
	int rc = ml_task_enter(self->task);
	entered += rc == 0;
	PyObject *r =
	    PyObject_Vectorcall(args[0], args + 1, (size_t)(nargs - 1), NULL);
	if (rc == 0 && ml_task_leave(self->task) >= 0)
		entered--;
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

static PyType_Spec task_spec = {
    "memlimits._memlimits._Task", sizeof(TaskObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, task_slots};

/* ---- Process-wide functions -------------------------------------------- */

static PyObject *m_heap(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return PyLong_FromUnsignedLongLong(ml_global_memory_usage());
}
static PyObject *m_global_limit(PyObject *m, PyObject *unused)
{
	(void)m, (void)unused;
	return limit_value(ml_global_limit());
}
static PyObject *m_set_global_limit(PyObject *m, PyObject *arg)
{
	(void)m;
	unsigned long long v;
	if (parse_limit(arg, &v))
		return NULL;
	/* The heap the limit reads counts objects from now on, on every
	 * thread. */
	int rc = ml_set_global_limit(v);
	if (rc == 0 && v != ML_NO_LIMIT)
		wrap();
	if (rc == 0)
		count_all = preloaded || v != ML_NO_LIMIT;
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
	return Py_BuildValue("{s:I,s:s,s:s,s:O,s:O,s:K}", "mask", c, "counting",
	                     counting, "library", ml_version(), "preloaded",
	                     preloaded ? Py_True : Py_False, "wrapped",
	                     wrapped ? Py_True : Py_False, "interval",
	                     (unsigned long long)ml_sample_interval());
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
    {"is_interrupted", m_interrupted, METH_NOARGS,
     "is_interrupted() -> bool: ml_is_interrupted."},
    {NULL, NULL, 0, NULL}};

static int module_exec(PyObject *m)
{
	if (!hooked && install_hooks() != 0)
		return -1;
	TaskType = (PyTypeObject *)PyType_FromSpec(&task_spec);
	if (!TaskType)
		return -1;
	if (PyModule_AddObject(m, "_Task", (PyObject *)TaskType) < 0) {
		Py_DECREF(TaskType);
		return -1;
	}
	Py_INCREF(TaskType);
	return 0;
}

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
	/* The package's version, as setup.py found it (configure.ac's):
	 * memlimits.__version__. */
	if (module_exec(m) != 0 ||
	    PyModule_AddStringConstant(m, "__version__", ML_PY_VERSION) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
