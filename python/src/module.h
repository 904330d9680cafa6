/* What the files of memlimits._memlimits share: the state of the
 * allocator hooks (hooks.c, pymalloc.c), the per-thread counters the
 * wrappers and the refusal guard read (pymalloc.c, guard.c, task.c), and
 * the Task type's entry points (task.c) that the module (_memlimits.c)
 * registers.  Every name here is hidden: the extension exports only
 * PyInit__memlimits. */
#ifndef MLPY_MODULE_H
#define MLPY_MODULE_H

#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <Python.h>

#include <memlimits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MLPY_HIDDEN __attribute__((visibility("hidden")))
#define MLPY_TLS __thread __attribute__((tls_model("initial-exec")))

/* hooks.c: how Python's allocations reach the library. */
MLPY_HIDDEN extern int mlpy_preloaded; /* the library is the process's malloc */
MLPY_HIDDEN extern int mlpy_hooked;    /* the domains are ours */
MLPY_HIDDEN extern int mlpy_wrapped;   /* the domains' wrappers are in */
MLPY_HIDDEN extern const char *mlpy_counting;
/* "patched", "preloaded" or "off: why" (ml_patch_objects at import). */
MLPY_HIDDEN extern const char *mlpy_extensions;
/* C code's own malloc reaches the library (preloaded or patched): the
 * domains' wrappers mark the interpreter's allocations, and the refusal
 * guard grants only those. */
MLPY_HIDDEN extern int mlpy_c_counted;
MLPY_HIDDEN int mlpy_install_hooks(void);
MLPY_HIDDEN void mlpy_wrap(void);
MLPY_HIDDEN void mlpy_raw_ours(PyMemAllocatorEx *a);

/* arenas.c: pymalloc's arenas from the import on, raw mappings in
 * granules of 2^MLPY_ARENA_BITS marked in a bitmap; the pools' layout. */
#define MLPY_ARENA_BITS 18
/* A pool's size: 16 KiB from 3.10 on (USE_LARGE_POOLS, with the radix
 * tree), 4 KiB (a page) before; validate_classes checks it. */
#if PY_VERSION_HEX >= 0x030A0000
#define MLPY_POOL_BITS 14
#else
#define MLPY_POOL_BITS 12
#endif
#define MLPY_POOL_SZIDX_OFF 36 /* struct pool_header's szidx (obmalloc.c) */
#define MLPY_ALIGN_SHIFT 4
MLPY_HIDDEN extern uint8_t *mlpy_arena_map;
MLPY_HIDDEN size_t mlpy_arenas_live(void);
static inline int mlpy_in_arena(const void *p)
{
	uintptr_t m = (uintptr_t)p >> MLPY_ARENA_BITS;
	if (m >> (47 - MLPY_ARENA_BITS))
		return 0;
	return (mlpy_arena_map[m >> 3] >> (m & 7)) & 1;
}
static inline uintptr_t mlpy_pool_of(const void *p)
{
	return (uintptr_t)p & ~(((uintptr_t)1 << MLPY_POOL_BITS) - 1);
}
/* The size class of a block of pymalloc's (in one of our arenas, or in a
 * pool of oldpools.c). */
static inline size_t mlpy_block_class(const void *p)
{
	unsigned szidx =
	    *(const unsigned *)(mlpy_pool_of(p) + MLPY_POOL_SZIDX_OFF);
	return ((size_t)szidx + 1) << MLPY_ALIGN_SHIFT;
}

/* pymalloc.c: the MEM and OBJ domains' wrappers.
 * mlpy_entered: this thread's slices open in tasks of this module;
 * mlpy_count_all: objects are noted on every thread (a global limit, or
 * the preload); mlpy_in_python: inside a wrapper that marks. */
MLPY_HIDDEN extern MLPY_TLS unsigned mlpy_entered;
MLPY_HIDDEN extern MLPY_TLS unsigned mlpy_in_python;
MLPY_HIDDEN extern MLPY_TLS size_t mlpy_req;   /* for the guard's budget */
MLPY_HIDDEN extern MLPY_TLS size_t mlpy_grace; /* its bytes left (guard.c) */
MLPY_HIDDEN extern int mlpy_count_all;
MLPY_HIDDEN int mlpy_arenas_install(void);
MLPY_HIDDEN void mlpy_wrap_domains(int marking);
MLPY_HIDDEN void mlpy_meter_started(int on);
MLPY_HIDDEN PyMemAllocatorEx *mlpy_domain_prev(PyMemAllocatorDomain d);
MLPY_HIDDEN void mlpy_domain_ours(PyMemAllocatorDomain d, PyMemAllocatorEx *a);

/* rehook.c: the wrappers checked at every enter, and put back over a hook
 * that took them out (tracemalloc.stop(), another extension's
 * PyMem_SetAllocator). */
MLPY_HIDDEN void mlpy_rehook(void);

/* oldpools.c: pools of the arenas pymalloc made before the import. */
#define MLPY_OLD_SLOTS_BITS 15
#define MLPY_OLD_SLOTS ((size_t)1 << MLPY_OLD_SLOTS_BITS)
MLPY_HIDDEN extern uintptr_t mlpy_old_slots[MLPY_OLD_SLOTS];
static inline size_t mlpy_old_slot_of(uintptr_t pool)
{
	return (size_t)(((uint64_t)pool * 0x9E3779B97F4A7C15ull) >>
	                (64 - MLPY_OLD_SLOTS_BITS));
}
static inline int mlpy_old_pool_has(uintptr_t pool)
{
	for (size_t i = mlpy_old_slot_of(pool), k = 0; k < MLPY_OLD_SLOTS;
	     i = (i + 1) & (MLPY_OLD_SLOTS - 1), k++) {
		if (mlpy_old_slots[i] == pool)
			return 1;
		if (mlpy_old_slots[i] == 0)
			return 0;
	}
	return 0;
}
MLPY_HIDDEN void mlpy_old_pool_add(uintptr_t pool);
MLPY_HIDDEN void mlpy_old_pools_drop(const void *p, size_t n);
/* hooks.c counts the RAW domain's calls on this thread: a block that
 * pymalloc handed out with no RAW call between is one of its own. */
MLPY_HIDDEN extern MLPY_TLS unsigned mlpy_raw_calls;

/* guard.c: what the library asks before it refuses; what a stopped
 * block may keep past its stop, at most (docs/python.md). */
#define MLPY_GRACE_BYTES ((size_t)1 << 20)
MLPY_HIDDEN bool mlpy_refusal_guard(void *arg);

/* frames.c: the frame source that names Python's frames in the stacks
 * captured at samples (CPython 3.11; 0 elsewhere: no source). */
MLPY_HIDDEN extern int mlpy_frames_on;
MLPY_HIDDEN int mlpy_frames_install(void);
MLPY_HIDDEN void mlpy_frames_uninstall(void);

/* task.c: the _Task type, and the conversions the module shares. */
MLPY_HIDDEN extern PyType_Spec mlpy_task_spec;
MLPY_HIDDEN extern PyType_Spec mlpy_stepper_spec;
MLPY_HIDDEN extern PyTypeObject *mlpy_task_type; /* set at module_exec */
MLPY_HIDDEN ml_task *mlpy_task_handle(PyObject *task);
MLPY_HIDDEN int mlpy_slice_enter(ml_task *t);
MLPY_HIDDEN void mlpy_slice_leave(ml_task *t);
MLPY_HIDDEN int mlpy_parse_limit(PyObject *o, unsigned long long *out);
MLPY_HIDDEN PyObject *mlpy_limit_value(unsigned long long v);

#endif
