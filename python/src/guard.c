/* memlimits._memlimits, the refusal guard: which refusals the library
 * lets through (ml_set_refusal_guard), so that the interpreter can unwind
 * a stopped block.
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
#include "module.h"

/* After a refusal, the next GRACE allocations of the thread may go
 * through (then the next is refused again): CPython normalizes an
 * exception with the current one fetched (cleared), and dies ("Cannot
 * recover from MemoryErrors while normalizing exceptions", seen under
 * make check) when that keeps failing.  What those grants may keep is
 * bounded in bytes: GRACE_BYTES in all from the thread's entry into its
 * outermost block (task.c resets mlpy_grace there), each allocation
 * counted at its size (mlpy_req: RAW blocks and the preload's requests)
 * or at 512 bytes (an object of an arena, the largest class).  Once it
 * is spent, only an exception's own propagation is let through: a
 * runaway that catches MemoryError and goes on keeps at most
 * MLPY_GRACE_BYTES
 * past its stop (and a granted allocation is one the budget still
 * covers whole: a 1 MB bytearray is never granted). */
#define GRACE 256
#define OBJECT_BYTES 512
static MLPY_TLS unsigned grace;
MLPY_TLS size_t mlpy_grace = MLPY_GRACE_BYTES;

/* Whether an exception is propagating on this thread.  The public calls
 * (PyErr_Occurred, PyErr_GetRaisedException, PyErr_Fetch) need the GIL,
 * which a RAW allocation may be made without, and assert a thread state;
 * so the thread state's own field is read, as each version names it:
 * curexc_type up to 3.11, current_exception from 3.12 on (the
 * normalized exception).  The thread state comes from the unchecked
 * getter, public from 3.13 on (PyThreadState_GetUnchecked). */
static inline int propagating(void)
{
#if PY_VERSION_HEX >= 0x030D0000
	PyThreadState *ts = PyThreadState_GetUnchecked();
#else
	PyThreadState *ts = _PyThreadState_UncheckedGet();
#endif
	if (!ts)
		return 0;
#if PY_VERSION_HEX >= 0x030C0000
	return ts->current_exception != NULL;
#else
	return ts->curexc_type != NULL;
#endif
}

bool mlpy_refusal_guard(void *arg)
{
	(void)arg;
	/* A C library's own malloc (preloaded, or its object patched) gets
	 * no grace; without either the library sees only the domains'
	 * blocks. */
	if (mlpy_c_counted && !mlpy_in_python)
		return true;
	if (propagating())
		return false;
	size_t req = mlpy_req ? mlpy_req : OBJECT_BYTES;
	mlpy_req = 0;
	if (grace && req <= mlpy_grace) {
		grace--;
		mlpy_grace -= req;
		return false;
	}
	grace = GRACE;
	return true;
}
