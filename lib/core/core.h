/* Layer 4, services the core needs (docs/internals.md, "Layers"): its
 * own settings (interval, seed, default delivery) and stack capture with
 * frame classification, which jump safety and profiles use.  Never
 * installed. */
#ifndef ML_CORE_H
#define ML_CORE_H

#include "alloc/alloc.h"
#include "sampler/sampler.h"

#pragma GCC visibility push(hidden)

/* ---- Settings (settings.c) -------------------------------------------- */

extern _Atomic uint64_t ml__interval; /* S */
extern _Atomic uint64_t ml__seed;
/* Bumped at every change: a thread compares its own copy at each slow
 * path and applies the new value then (tasks/thread.c). */
extern _Atomic uint32_t ml__seed_epoch;
extern _Atomic uint32_t ml__interval_epoch;
extern _Atomic int ml__default_delivery;
void ml__set_interval(uint64_t bytes); /* bytes > 0 */
void ml__set_seed(uint64_t seed);
/* MEMLIMITS_SAMPLE_INTERVAL, _SEED, _DELIVERY, _FAULT; a malformed value
 * gets one line on stderr and changes nothing.  Called once, at start. */
void ml__settings_read_env(void);

/* ---- Stack capture and the unwinder (capture.c) ----------------------- */

/* At start: find libgcc_s's unwinder (never from inside malloc). */
void ml__unwind_load(void);
bool ml__unwind_loaded(void);
/* Return addresses, innermost first; 0 frames if no unwinder is loaded.
 * Opens no descriptor. */
int ml__backtrace(void **ip, int max);
/* Around every walk (frames.c's too): keeps fork from finding libgcc's
 * own mutex held. */
void ml__unwind_lock(void);
void ml__unwind_unlock(void);

/* ---- Frame classification (frames.c) ---------------------------------- */

enum ml__frames {
	ML__FRAMES_SAFE = 0,    /* only user code between here and the task */
	ML__FRAMES_RUNTIME = 1, /* a libc/loader/libstdc++/libgcc/own frame */
	ML__FRAMES_LOADER = 2,  /* a frame that cannot survive a failure    */
};
/* Classify the frames between the caller and `stop` (an address in the
 * target ml_run's frame).  stop = 0: the loader check only, over the
 * runtime frames the allocation came through up to the first user frame
 * (its cost does not grow with the depth of the stack).  The unwinder may
 * allocate: the caller lets such allocations through untouched. */
enum ml__frames ml__frames_check(uintptr_t stop);
void ml__unwind_init(void);

/* ---- Interned call stacks (stacks.c) ---------------------------------- */

#define ML__STACK_DEPTH 64
#define ML__STACK_TRUNCATED 0x80000000u /* in depth: deeper frames cut */
#define ML__NSTACKS 16384               /* distinct stacks; ids 1..this */
struct ml__stack {
	_Atomic uint32_t ready;        /* ip and depth are written */
	uint32_t depth;                /* | ML__STACK_TRUNCATED */
	uintptr_t ip[ML__STACK_DEPTH]; /* innermost first */
};
/* Who wants stacks at samples: a mask, so that run mode's profile and the
 * program's ml_set_stack_capture turn it on and off independently. */
#define ML__STACKS_API 1u
#define ML__STACKS_RUN 2u
extern _Atomic unsigned ml__stacks_wanted;
/* The caller's stack without the library's frames, innermost first, as
 * the program's frame source (ml_set_frame_source) rewrote it, at most
 * ML__STACK_DEPTH frames: depth | ML__STACK_TRUNCATED. */
uint32_t ml__stack_capture(uintptr_t *ip);
/* Named frames (names.c): a stack entry with ML__FRAME_NAMED set is
 * ml_frame_name's, and prints as ml__frame_text's text ("[unnamed]" for
 * a value that names nothing). */
#define ML__FRAME_NAMED ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 1))
#define ML__NAME_MAX 255
static inline bool ml__frame_named(uintptr_t frame)
{
	return (frame & ML__FRAME_NAMED) != 0;
}
const char *ml__frame_text(uintptr_t frame);
/* The stack's id, 1..ML__NSTACKS, or 0 when the table is full. */
uint32_t ml__stack_intern(const uintptr_t *ip, uint32_t depth);
uint32_t ml__stack_here(void); /* capture and intern */
/* The stack of an id; NULL for 0 or one not written yet. */
const struct ml__stack *ml__stack_get(uint32_t id);

#pragma GCC visibility pop

#endif
