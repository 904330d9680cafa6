/* Python's frames in the library's stacks (ml_set_frame_source): where a
 * sampled allocation's captured stack passes through the interpreter's
 * eval loop (_PyEval_EvalFrameDefault), the loop's C frame is replaced by
 * the Python frames that call of it was running, innermost first, each
 * named "file:function" (ml_frame_name), and the innermost one
 * "file:function:line".  Only the innermost gets its line: a caller's line
 * would make each calling line a stack of its own, and the library's
 * table of stacks is fixed (ML__NSTACKS), so a long-running program's
 * would fill and its later stacks print as "[unknown]".  Held profiles
 * (ml_write_held_profile, memlimits.profile_at_stop, run mode's
 * --profile in a program that imports the module) then say which Python
 * functions held the memory, with the C frames between them.
 *
 * The source runs inside the sampled allocation, on the allocating
 * thread, only while stack capture is on: nothing here runs for the
 * allocations that are not sampled.  It reads the thread's own frame
 * chain, which cannot change until the allocation returns (only this
 * thread pushes and pops its frames), whether or not the thread holds the
 * GIL; the code objects it reads are held by those frames.  It allocates
 * nothing and calls nothing of the interpreter's that could: the names'
 * text is read from the str objects' own buffers (PyUnicode_AsUTF8 may
 * allocate its UTF-8 cache), the line from the code object's line table
 * (PyCode_Addr2Line, a walk of bytes).
 *
 * The frame chain is private to each CPython version: CPython 3.11's
 * _PyInterpreterFrame (internal/pycore_frame.h, under the version guard
 * below) is read here, and on any other version no source is installed
 * (capabilities()["python_frames"] is False, and profiles name C frames
 * only).  In 3.11 one call of the eval loop runs several Python frames
 * (a Python function calling another stays in the same loop); the
 * outermost frame of each call is marked is_entry, which is how the
 * frames are shared out among the loop's C frames. */
#include "module.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define MLPY_FRAMES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#else
#define MLPY_FRAMES 0
#endif

int mlpy_frames_on;

#if MLPY_FRAMES

/* The eval loop's code: [lo, hi).  A return address inside it is a call
 * the loop made (ip - 1: a call that ends the function returns past it). */
static uintptr_t eval_lo, eval_hi;
/* This module's own code: its allocator wrappers are the innermost frames
 * of every Python allocation, and left out as the library leaves out its
 * own. */
static uintptr_t self_lo, self_hi;

#define NAME_MAX_BYTES 255 /* ml_frame_name keeps as much */
#define FRAMES_MAX 128

struct text {
	char b[NAME_MAX_BYTES];
	size_t n;
};

static void put_bytes(struct text *t, const char *s, size_t n)
{
	if (n > sizeof t->b - t->n)
		n = sizeof t->b - t->n;
	memcpy(t->b + t->n, s, n);
	t->n += n;
}

/* A str's characters as UTF-8, from its own buffer. */
static void put_str(struct text *t, PyObject *s)
{
	if (!s || !PyUnicode_Check(s) || !PyUnicode_IS_READY(s)) {
		put_bytes(t, "?", 1);
		return;
	}
	if (PyUnicode_IS_COMPACT_ASCII(s)) {
		put_bytes(t, (const char *)PyUnicode_DATA(s),
		          (size_t)PyUnicode_GET_LENGTH(s));
		return;
	}
	int kind = PyUnicode_KIND(s);
	const void *data = PyUnicode_DATA(s);
	Py_ssize_t len = PyUnicode_GET_LENGTH(s);
	for (Py_ssize_t i = 0; i < len && t->n < sizeof t->b; i++) {
		Py_UCS4 c = PyUnicode_READ(kind, data, i);
		char u[4];
		size_t k;
		if (c < 0x80) {
			u[0] = (char)c;
			k = 1;
		} else if (c < 0x800) {
			u[0] = (char)(0xC0 | c >> 6);
			u[1] = (char)(0x80 | (c & 0x3F));
			k = 2;
		} else if (c < 0x10000) {
			u[0] = (char)(0xE0 | c >> 12);
			u[1] = (char)(0x80 | (c >> 6 & 0x3F));
			u[2] = (char)(0x80 | (c & 0x3F));
			k = 3;
		} else {
			u[0] = (char)(0xF0 | c >> 18);
			u[1] = (char)(0x80 | (c >> 12 & 0x3F));
			u[2] = (char)(0x80 | (c >> 6 & 0x3F));
			u[3] = (char)(0x80 | (c & 0x3F));
			k = 4;
		}
		if (k > sizeof t->b - t->n)
			break; /* no half characters */
		put_bytes(t, u, k);
	}
}

static void put_int(struct text *t, int v)
{
	char d[12];
	size_t k = 0;
	unsigned u = v < 0 ? 0u : (unsigned)v;
	do
		d[sizeof d - ++k] = (char)('0' + u % 10);
	while ((u /= 10) && k < sizeof d);
	put_bytes(t, d + sizeof d - k, k);
}

/* "file:function", and ":line" after it for the innermost Python frame
 * (lasti >= 0), as a frame of the library's. */
static uintptr_t frame_name(PyCodeObject *code, int lasti)
{
	struct text t = {.n = 0};
	put_str(&t, code->co_filename);
	put_bytes(&t, ":", 1);
	put_str(&t, code->co_qualname);
	if (lasti >= 0) {
		put_bytes(&t, ":", 1);
		put_int(&t, PyCode_Addr2Line(
		                code, lasti * (int)sizeof(_Py_CODEUNIT)));
	}
	return ml_frame_name(t.b, t.n);
}

/* The names made already, by (code object, instruction): building one
 * costs about a thousand instructions (the text, its hash in the
 * library, the line table's walk), and a sample of a framework's request
 * meets thirty frames, most of them the same each time.  Shared by every
 * thread without a lock: each entry has a sequence count, odd while one
 * thread writes it (another that finds it odd neither reads nor writes
 * it), and a reader keeps what it read only if the count was even and
 * unchanged around it.  The key hashes the code object's address with its
 * file and name objects' and the instruction, so that a code object freed
 * and another made at its address (with other strings) is not taken for
 * it. */
#define CACHE_BITS 12
static struct cached {
	_Atomic uint32_t seq;
	_Atomic uint64_t key; /* relaxed: the count orders them */
	_Atomic uintptr_t frame;
} cache[1u << CACHE_BITS];

static uint64_t cache_key(PyCodeObject *code, int lasti)
{
	uint64_t h = (uint64_t)(uintptr_t)code * 0x9E3779B97F4A7C15u;
	h = (h ^ (uint64_t)(uintptr_t)code->co_filename) * 0xff51afd7ed558ccdu;
	h = (h ^ (uint64_t)(uintptr_t)code->co_qualname) * 0xc4ceb9fe1a85ec53u;
	h = (h ^ (uint64_t)(unsigned)lasti) * 0x9E3779B97F4A7C15u;
	return (h ^ h >> 29) | 1;
}

static uintptr_t frame_of(_PyInterpreterFrame *f, int innermost)
{
	PyCodeObject *code = f->f_code;
	int lasti = innermost ? _PyInterpreterFrame_LASTI(f) : -1;
	uint64_t key = cache_key(code, lasti);
	struct cached *e = &cache[key >> (64 - CACHE_BITS)];
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);
	if (!(s & 1)) {
		uint64_t k =
		    atomic_load_explicit(&e->key, memory_order_relaxed);
		uintptr_t v =
		    atomic_load_explicit(&e->frame, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (k == key &&
		    atomic_load_explicit(&e->seq, memory_order_relaxed) == s)
			return v;
	}
	uintptr_t v = frame_name(code, lasti);
	if (v && !(s & 1) &&
	    atomic_compare_exchange_strong_explicit(&e->seq, &s, s + 1,
	                                            memory_order_acquire,
	                                            memory_order_relaxed)) {
		atomic_thread_fence(memory_order_release);
		atomic_store_explicit(&e->key, key, memory_order_relaxed);
		atomic_store_explicit(&e->frame, v, memory_order_relaxed);
		atomic_store_explicit(&e->seq, s + 2, memory_order_release);
	}
	return v;
}

static int in_eval(uintptr_t ip)
{
	return ip - 1 >= eval_lo && ip - 1 < eval_hi;
}

static int source(uintptr_t *frames, int n, int max, void *arg)
{
	(void)arg;
	/* The thread's own state, through the GIL state's thread-local key
	 * (no lock, no allocation): NULL on a thread Python never ran on,
	 * and once the interpreter is finalized. */
	PyThreadState *ts = PyGILState_GetThisThreadState();
	if (!ts || !ts->cframe)
		return n;
	_PyInterpreterFrame *f = ts->cframe->current_frame;
	if (!f)
		return n;
	uintptr_t out[FRAMES_MAX];
	if (max > FRAMES_MAX)
		max = FRAMES_MAX;
	int k = 0, i = 0, any_named = 0;
	while (i < n && frames[i] >= self_lo && frames[i] < self_hi)
		i++;
	for (; i < n && k < max; i++) {
		if (!f || !in_eval(frames[i])) {
			out[k++] = frames[i];
			continue;
		}
		/* This call of the loop ran f and its callers up to the first
		 * entry frame. */
		int named = 0;
		for (; f; f = f->previous) {
			uintptr_t name = _PyFrame_IsIncomplete(f)
			                     ? 0
			                     : frame_of(f, !any_named);
			if (name && k < max) {
				out[k++] = name;
				named++;
				any_named = 1;
			}
			if (f->is_entry) {
				f = f->previous;
				break;
			}
		}
		if (!named && k < max)
			out[k++] = frames[i];
	}
	memcpy(frames, out, (size_t)k * sizeof *out);
	return k;
}

static int find_self(struct dl_phdr_info *o, size_t size, void *arg)
{
	(void)size, (void)arg;
	uintptr_t at = (uintptr_t)&source;
	for (int i = 0; i < o->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &o->dlpi_phdr[i];
		uintptr_t lo = o->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && at >= lo &&
		    at < lo + ph->p_memsz) {
			self_lo = lo;
			self_hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

int mlpy_frames_install(void)
{
	dl_iterate_phdr(find_self, NULL);
	Dl_info info;
	const ElfW(Sym) *sym = NULL;
	void *fn = (void *)&_PyEval_EvalFrameDefault;
	if (!dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
	    sym->st_size == 0)
		return 0;
	eval_lo = (uintptr_t)info.dli_saddr;
	eval_hi = eval_lo + sym->st_size;
	ml_set_frame_source(source, NULL);
	mlpy_frames_on = 1;
	return 1;
}

void mlpy_frames_uninstall(void)
{
	if (mlpy_frames_on)
		ml_set_frame_source(NULL, NULL);
	mlpy_frames_on = 0;
}

#else

int mlpy_frames_install(void)
{
	return 0;
}

void mlpy_frames_uninstall(void)
{
}

#endif
