/* memlimits._memlimits, the pools of pymalloc's arenas made before the
 * import: a set of their addresses, learnt as the MEM and OBJ wrappers
 * see pymalloc hand out their blocks (pymalloc.c), so that an object in
 * one of them is counted, refused and uncounted as an object of the
 * module's own arenas is, and a realloc of one is done by the module
 * (refusable, the old block intact on NULL).  Without it, a block that
 * pymalloc keeps reusing from such a pool (the string writer's buffer of
 * "%d" % i and str.format) was invisible, and the realloc that finished
 * the string moved it into an arena where a refusal could not be undone:
 * a stopped block ran on.
 *
 * A pool is learnt only from a block pymalloc returned without calling
 * the RAW domain (so it is pymalloc's), and a pool of an arena that
 * pymalloc frees is dropped before the arena is unmapped.  Everything
 * runs under the GIL (the MEM and OBJ domains, pymalloc's arena free). */
#include "module.h"

#include <stdint.h>

#define SLOTS MLPY_OLD_SLOTS
#define TOMB ((uintptr_t)1)

/* Open addressing, linear probing (the lookup, mlpy_old_pool_has, is
 * inline in module.h: it runs on frees); 0 empty, TOMB a dropped pool
 * (pools of the arenas made before the import only ever go away: no
 * reuse). */
uintptr_t mlpy_old_slots[MLPY_OLD_SLOTS];
#define slots mlpy_old_slots
static size_t used;

void mlpy_old_pool_add(uintptr_t pool)
{
	/* Full (three quarters: probes stay short): not learnt, and its
	 * objects stay uncounted, as they were before this table. */
	if (mlpy_old_pool_has(pool) || used >= SLOTS / 4 * 3)
		return;
	size_t i = mlpy_old_slot_of(pool);
	while (slots[i] != 0)
		i = (i + 1) & (SLOTS - 1);
	slots[i] = pool;
	used++;
}

void mlpy_old_pools_drop(const void *p, size_t n)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + n;
	if (!used)
		return;
	for (size_t i = 0; i < SLOTS; i++)
		if (slots[i] >= lo && slots[i] < hi)
			slots[i] = TOMB;
}
