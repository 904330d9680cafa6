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

/* After a refusal, the next GRACE allocations of the thread go through
 * (then the next is refused again): CPython normalizes an exception with
 * the current one fetched (cleared), and dies ("Cannot recover from
 * MemoryErrors while normalizing exceptions", seen under make check)
 * when that keeps failing.  A runaway that catches MemoryError and goes
 * on is refused again after GRACE allocations. */
#define GRACE 256
static MLPY_TLS unsigned grace;

bool mlpy_refusal_guard(void *arg)
{
	(void)arg;
	/* Without the preload the library sees only the domains' blocks. */
	if (mlpy_preloaded && !mlpy_in_python)
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
