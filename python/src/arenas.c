/* memlimits._memlimits, pymalloc's arenas: raw mappings that the library
 * does not count, made for pymalloc from the import on
 * (PyObject_SetArenaAllocator), in a bitmap that tells an arena's object
 * from a RAW block in one load (mlpy_in_arena, module.h); the check that
 * pools are laid out as this file reads them; and the bytes of the live
 * objects in them, for the meter's debt (pymalloc.c). */
#include "module.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- Arenas: raw mappings, in granules of 256 KiB, in a bitmap ---------
 *
 * A granule is ours whole or not at all, so that no other mapping (a
 * large RAW block) is ever taken for an arena.  256 KiB: Debian's 3.11
 * makes its arenas that size (ARENA_SIZE; 1 MiB with other build
 * options, also whole granules). */

uint8_t *mlpy_arena_map; /* a bit per granule of a 47-bit space */

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

static uintptr_t map_lo = UINTPTR_MAX, map_hi; /* granules ever marked */
static void arena_mark(void *p, size_t n, int on)
{
	if ((uintptr_t)p >> MLPY_ARENA_BITS < map_lo)
		map_lo = (uintptr_t)p >> MLPY_ARENA_BITS;
	if (((uintptr_t)p + n) >> MLPY_ARENA_BITS > map_hi)
		map_hi = ((uintptr_t)p + n) >> MLPY_ARENA_BITS;
	for (uintptr_t m = (uintptr_t)p >> MLPY_ARENA_BITS;
	     m < ((uintptr_t)p + n + (1u << MLPY_ARENA_BITS) - 1) >>
	     MLPY_ARENA_BITS;
	     m++) {
		if (on)
			mlpy_arena_map[m >> 3] |= (uint8_t)(1u << (m & 7));
		else
			mlpy_arena_map[m >> 3] &= (uint8_t) ~(1u << (m & 7));
	}
}

static void *arena_alloc(void *ctx, size_t n)
{
	(void)ctx;
	size_t a = (size_t)1 << MLPY_ARENA_BITS;
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
	size_t a = (size_t)1 << MLPY_ARENA_BITS;
	size_t whole = (n + a - 1) & ~(a - 1);
	/* An arena made before the module was imported (pymalloc's own
	 * mmap): exactly what it mapped. */
	if (!mlpy_in_arena(p)) {
		mlpy_old_pools_drop(p, n);
		sys_munmap(p, n);
		return;
	}
	arena_mark(p, whole, 0);
	sys_munmap(p, whole);
}

/* The live objects of our arenas (each pool's count of blocks in use, at
 * offset 0 of its header, times its class) and of the learnt pools, in
 * bytes.  Under the GIL. */
size_t mlpy_arenas_live(void)
{
	size_t live = 0;
	for (uintptr_t m = map_lo; mlpy_arena_map && m < map_hi; m++)
		for (uintptr_t q = m << MLPY_ARENA_BITS;
		     mlpy_in_arena((void *)q) && q < (m + 1) << MLPY_ARENA_BITS;
		     q += (uintptr_t)1 << MLPY_POOL_BITS)
			live +=
			    *(const unsigned *)q * mlpy_block_class((void *)q);
	for (size_t i = 0; i < MLPY_OLD_SLOTS; i++)
		if (mlpy_old_slots[i])
			live += *(const unsigned *)mlpy_old_slots[i] *
			        mlpy_block_class((void *)mlpy_old_slots[i]);
	return live;
}

/* The pool header is read as CPython 3.10 to 3.13 lay it out: checked on
 * blocks of every size class before any hook goes in. */
static int validate_classes(void)
{
	for (size_t n = 1; n <= 512; n += 3) {
		void *p = PyObject_Malloc(n);
		if (!p)
			return -1;
		size_t c = mlpy_block_class(p);
		PyObject_Free(p);
		if (c < n || c - n >= ((size_t)1 << MLPY_ALIGN_SHIFT))
			return -1;
	}
	return 0;
}

/* The arenas are ours from the import on, so that objects in the arenas
 * pymalloc makes before the first limit count from then.  0, or -1 with
 * why in mlpy_counting (nothing changed). */
int mlpy_arenas_install(void)
{
	if (validate_classes() != 0) {
		mlpy_counting =
		    "off: pymalloc's pools are not laid out as expected";
		return -1;
	}
	mlpy_arena_map = sys_mmap((size_t)1 << (47 - MLPY_ARENA_BITS - 3));
	if (!mlpy_arena_map) {
		mlpy_counting = "off: no memory for the arena map";
		return -1;
	}
	PyObjectArenaAllocator arenas = {NULL, arena_alloc, arena_free};
	PyObject_SetArenaAllocator(&arenas);
	return 0;
}
