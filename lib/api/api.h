/* Layer 7, the entry points (docs/internals.md, "Layers"): the exported
 * malloc family, start-up, and the public functions that act on the
 * calling thread's state.  They call down into the allocator and the
 * tasks' slow path.  Never installed. */
#ifndef ML_API_H
#define ML_API_H

#include "shared/shared.h"

/* The malloc family's definitions: exported, as ML_EXPORT makes the
 * public API. */
#define ML__API __attribute__((visibility("default")))

#pragma GCC visibility push(hidden)

/* ---- Counted mappings, for run mode's report (mmap.c) ------------------
 *
 * While ml__mapped_attribute is set (run mode, when a report may be
 * written), each counted mapping's bytes are added to the loaded object
 * that called mmap (mprotect, mremap): ML__MAPPED_BY objects at most, the
 * rest in none.  The first mapping the library refused is kept in any
 * case. */
#define ML__MAPPED_BY 32
struct ml__mapped_by {
	_Atomic uintptr_t obj;    /* the object's start; 0: a free slot */
	const char *_Atomic name; /* its link-map name ("": the program) */
	_Atomic uint64_t bytes, largest, count;
};
extern _Atomic bool ml__mapped_attribute;
extern struct ml__mapped_by ml__mapped_by[ML__MAPPED_BY];
struct ml__mapped_refusal {
	_Atomic bool set;
	const char *op; /* "mmap", "mprotect", "mremap" */
	uint64_t bytes; /* the bytes that would have counted */
	uintptr_t pc;   /* its caller */
};
extern struct ml__mapped_refusal ml__mapped_refused;
extern _Atomic uint64_t ml__mapped_refusals;

/* Private memory got by other calls than the mmap family (private.c:
 * sbrk, shmat), counted as a mapping of n bytes (mmap.c): make(arg) gets
 * it and returns its first counted byte, 0 on failure; 0 and ENOMEM when
 * refused.  ml__unmap_private: [a, b) no longer counts. */
uintptr_t ml__map_private(uintptr_t n, uintptr_t (*make)(void *), void *arg,
                          const char *op, uintptr_t pc);
void ml__unmap_private(uintptr_t a, uintptr_t b);
/* SysV segments attached and not counted (private.c): with a key (shared
 * between processes), and IPC_PRIVATE ones its table had no room for;
 * bytes, all told.  For run mode's report. */
extern _Atomic uint64_t ml__shm_keyed_bytes, ml__shm_untracked_bytes;
/* The IPC_PRIVATE segments attached and counted (private.c), in bytes. */
extern _Atomic uint64_t ml__shm_private_bytes;
/* What the process really holds, less `old` (realloc's old block): its
 * blocks as counted or, if more, its resident private memory and the
 * IPC_PRIVATE segments it attached; UINT64_MAX where that cannot be read.
 * Raw system calls, no lock, errno kept (mmap.c). */
uint64_t ml__held_really(uint64_t old);

#pragma GCC visibility pop

#endif
