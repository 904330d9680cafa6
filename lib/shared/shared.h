/* Layer 6, shared (docs/internals.md, "Shared budgets"): budgets shared by
 * several processes (ml_shared_join).  One shared-memory table per budget
 * and user; each member publishes its heap and its largest eligible global
 * task there, in batches, from the meter's fold hook; whoever sees the
 * total over the limit posts a stop request to the member holding the
 * most, which checks it and interrupts its task.  Sits above tasks (it
 * reads the global tasks and trips them) and below api (start-up joins
 * from MEMLIMITS_SHARED) and run (ml_task_describe names it).  Never
 * installed. */
#ifndef ML_SHARED_H
#define ML_SHARED_H

#include "tasks/tasks.h"

#pragma GCC visibility push(hidden)

/* Slots in a table made without a count (ml_shared_create's 0, or
 * MEMLIMITS_SHARED_SLOTS unset): members at once.  A join finding none
 * free (after sweeping the dead) fails with ML_ENOMEM. */
#define ML__SHARED_SLOTS ML_SHARED_DEFAULT_SLOTS
#define ML__SHARED_SLOTS_MAX 65536u
/* A member publishes when its heap has changed by the batch since it last
 * did: max(limit / 8192, ML__SHARED_MIN_BATCH). */
#define ML__SHARED_MIN_BATCH ((uint64_t)1 << 20)

/* ml_shared_join / ml_shared_leave / ml_shared_usage / ml_shared_limit. */
int ml__shared_join(const char *name, uint64_t limit);
int ml__shared_leave(void);
uint64_t ml__shared_usage(void);
uint64_t ml__shared_limit(void);
/* ml_shared_create / ml_shared_set_wake / ml_shared_members (0.4). */
int ml__shared_create(uint64_t limit, uint32_t slots);
int ml__shared_set_wake(int signo, ml_wake_fn fn, void *arg);
size_t ml__shared_members(ml_shared_member *out, size_t n);
/* This process is a member. */
bool ml__shared_member(void);
/* MEMLIMITS_SHARED=NAME[:SIZE], read once at start (api/init.c): join
 * NAME with the limit SIZE, or the limit in force.  For exec'd programs
 * (run mode's --tree-heap-limit sets it, with MEMLIMITS_SHARED_TREE=PID:
 * a process of another pid than PID joins the limit in force, never
 * making the table). */
void ml__shared_from_env(void);
/* The members' total as last published, plus this process's heap now and
 * n more bytes, past the limit: 0 when within, or not a member (run
 * mode's --tree-heap-limit refuses the allocation then); a fork child
 * that found no free slot is refused every byte (it cannot be counted).
 * Atomics only: callable inside malloc. */
uint64_t ml__shared_overshoot(uint64_t n);

#pragma GCC visibility pop

#endif
