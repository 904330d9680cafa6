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

#include <sys/types.h>

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
 * with no slot yet claims one first, and one that finds no free slot is
 * refused every byte (it cannot be counted).  Atomics, and that claim
 * once: callable inside malloc. */
uint64_t ml__shared_overshoot_or(uint64_t n, uint64_t busy);
/* ml__shared_overshoot_or answers `busy` where another thread of this
 * process holds the slots' lock (the check cannot wait for it inside
 * malloc); ml__shared_overshoot answers 0 then, letting the allocation
 * through. */
static inline uint64_t ml__shared_overshoot(uint64_t n)
{
	return ml__shared_overshoot_or(n, 0);
}

/* ---- Between the layer's files ------------------------------------------ */
/* The table's layout (docs/internals.md, "Shared budgets") and what the
 * files of lib/shared/ share: each name below says which file has it. */

#define ML__SHARED_MAGIC 0x6d6c736861726502ull /* "mlshare", layout 2 */
#define ML__SHARED_LAYOUT 2u
#define ML__SHARED_PID_LIMIT 4194304 /* PID_MAX_LIMIT on 64-bit Linux */
/* A slot's figures are clamped to this: garbage cannot overflow a sum. */
#define ML__SHARED_HEAP_CLAMP ((uint64_t)1 << 50)
/* Every 16th sum also checks each member in /proc (a full sweep). */
#define ML__SHARED_FULL_EVERY 16

/* A slot's state, in its tag (changed by CAS only). */
enum { ML__SHARED_FREE = 0, ML__SHARED_CLAIMING = 1, ML__SHARED_LIVE = 2 };

struct ml__shared_head {
	_Atomic uint64_t magic; /* stored last by the maker */
	_Atomic uint32_t layout;
	_Atomic uint32_t nslots; /* slots, as the file's size says too */
	_Atomic uint64_t limit;
	_Atomic uint32_t high_water; /* slots [0, high_water) may be used */
	uint32_t pad0;
	char pad[32];
};

struct ml__shared_copy {
	_Atomic uint64_t heap;       /* published heap, bytes            */
	_Atomic uint64_t top_held;   /* largest eligible task's estimate */
	_Atomic uint64_t top_id;     /* its identity, 0: none            */
	_Atomic uint64_t stopping;   /* held by its stopped tasks        */
	_Atomic uint64_t stop_since; /* CLOCK_MONOTONIC ns, stopping > 0 */
};

struct ml__shared_slot {
	_Atomic uint64_t tag;      /* pid << 32 | gen << 2 | state       */
	_Atomic uint64_t start;    /* the pid's start time (clock ticks) */
	_Atomic uint64_t exec_tok; /* its image's token, 0: unknown      */
	_Atomic uint64_t seq;      /* publications; copy[seq & 1] holds  */
	_Atomic uint64_t request;  /* a stop request: a top_id, 0: none  */
	_Atomic uint64_t req_time; /* when it was posted (monotonic ns)  */
	_Atomic uint64_t wake;     /* the signal that wakes it, 0: none  */
	struct ml__shared_copy copy[2];
	uint64_t pad[7];
};

_Static_assert(sizeof(struct ml__shared_head) == 64, "head is one cache line");
_Static_assert(sizeof(struct ml__shared_slot) == 192,
               "a slot is three cache lines");

struct ml__shared_table {
	struct ml__shared_head head;
	struct ml__shared_slot slot[];
};

static inline size_t ml__shared_table_bytes(uint32_t n)
{
	return sizeof(struct ml__shared_head) +
	       (size_t)n * sizeof(struct ml__shared_slot);
}

static inline pid_t ml__shared_tag_pid(uint64_t tag)
{
	return (pid_t)(uint32_t)(tag >> 32);
}
static inline unsigned ml__shared_tag_state(uint64_t tag)
{
	return (unsigned)(tag & 3);
}
static inline uint64_t ml__shared_tag_make(pid_t pid, uint64_t old,
                                           unsigned state)
{
	uint64_t gen = ((old >> 2) + 1) & 0x3fffffff;
	return (uint64_t)(uint32_t)pid << 32 | gen << 2 | state;
}

static inline uint64_t ml__shared_add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static inline uint64_t ml__shared_clamp(uint64_t v)
{
	return v < ML__SHARED_HEAP_CLAMP ? v : ML__SHARED_HEAP_CLAMP;
}

/* What a member publishes: one copy of a slot, as read or to write. */
struct ml__shared_figures {
	uint64_t heap, top_held, top_id, stopping, stop_since;
};

/* A sum of the table (ml__shared_sum_table): the members' total, what is
 * on its way back, and the largest holder with no request pending. */
struct ml__shared_totals {
	uint64_t total, stopping, limit;
	int best; /* slot to ask, -1: none */
	uint64_t best_held, best_id;
	bool requests; /* some request pending */
};

/* ml__shared_trip_named's argument: the identity a request names. */
struct ml__shared_trip_arg {
	uint64_t id;
	bool found, tripped;
};

/* slots.c: this process as a member (its slot, -1 none; its pid, start
 * time and exec token for ml__lineage; the heap inherited at a fork; what
 * its last sum and publication saw), the slots, the two copies. */
uint64_t ml__shared_now_ns(void); /* CLOCK_MONOTONIC, ns */
extern uint32_t ml__shared_nslots;
extern int ml__shared_my_slot;
extern uint64_t ml__shared_my_tag, ml__shared_my_start, ml__shared_my_token;
extern pid_t ml__shared_my_pid;
extern uint32_t ml__shared_my_lineage;
extern uint64_t ml__shared_inherited, ml__shared_summed_heap;
extern uint64_t ml__shared_last_stopping, ml__shared_stopping_since;
extern bool ml__shared_claim_failed;
bool ml__shared_same_process(struct ml__shared_slot *s, pid_t pid, bool *known);
bool ml__shared_member_alive(struct ml__shared_table *t, int i, uint64_t tag,
                             bool full);
void ml__shared_slot_free(struct ml__shared_table *t, int i, uint64_t tag);
uint32_t ml__shared_slots_used(struct ml__shared_table *t);
void ml__shared_raise_high_water(struct ml__shared_table *t, uint32_t n);
bool ml__shared_know_self(void);
int ml__shared_claim(struct ml__shared_table *t, int signo);
bool ml__shared_slot_ours(struct ml__shared_table *t);
void ml__shared_copy_write(struct ml__shared_slot *s,
                           const struct ml__shared_figures *v);
bool ml__shared_copy_read(struct ml__shared_slot *s,
                          struct ml__shared_figures *v);

/* table.c: the mapping (NULL: not a member), the locks, opening and
 * filling a table in, the SIGBUS guard, leaving. */
extern struct ml__shared_table *_Atomic ml__shared_joined;
extern void *_Atomic ml__shared_map_base;
extern _Atomic size_t ml__shared_map_len;
extern _Atomic bool ml__shared_map_lost;
extern char ml__shared_name[ML__SHARED_NAME_MAX + 1];
extern uint32_t ml__shared_env_slots;
extern struct ml__lock ml__shared_join_lock, ml__shared_slot_lock;
bool ml__shared_slot_count_ok(uint64_t n);
void ml__shared_table_init(struct ml__shared_table *t, uint32_t n,
                           uint64_t limit);
int ml__shared_open_table(const char *name, uint64_t limit,
                          struct ml__shared_table **out, uint32_t *out_n);
void ml__shared_sigbus_guard(void);
void ml__shared_leave_table(struct ml__shared_table *t);
/* The table, or NULL (none, or lost: then left).  The slot lock held. */
struct ml__shared_table *ml__shared_table_in_use(void);

/* wake.c: task identities (pointer ^ key), tripping the task a request
 * names (from a visit of the global tasks; a request the handler could not
 * carry out waits in ml__shared_wake_deferred), signalling the target. */
extern uint64_t ml__shared_id_key;
extern bool ml__shared_wake_asked;
extern _Atomic uint64_t ml__shared_wake_deferred;
int ml__shared_wake_signal(void); /* what our slot advertises, 0: none */
uint64_t ml__shared_task_id(const struct ml_task *task);
void ml__shared_trip_named(struct ml_task *task, void *arg);
/* A wake deferred (its handler found the slot lock or the global list
 * taken): carried out now if its request still stands in our slot (t:
 * the table, the slot lock held; NULL drops it). */
void ml__shared_trip_deferred(struct ml__shared_table *t);
/* The program's wake callback (ml_shared_set_wake), if any: a task of
 * ours was just interrupted for another member's request. */
void ml__shared_wake_callback(void);
void ml__shared_wake_target(struct ml__shared_table *t, int i, uint64_t id);
void ml__shared_wake_install(bool asked);

/* choice.c: publication, sums, the choice and its requests. */
extern _Atomic int64_t ml__shared_held_moved;
extern uint32_t ml__shared_sums_done;
extern _Atomic bool ml__shared_pressure_above, ml__shared_pressure_due;
extern _Atomic uint64_t ml__shared_pressure_total;
uint64_t ml__shared_heap_now(void);
void ml__shared_publish(struct ml__shared_table *t);
/* The same with `ahead` bytes more than the heap now: an allocation
 * about to be made (--tree-heap-limit's check, ml__shared_overshoot). */
void ml__shared_publish_ahead(struct ml__shared_table *t, uint64_t ahead);
void ml__shared_sum_table(struct ml__shared_table *t, bool full, int skip,
                          bool readonly, struct ml__shared_totals *v);
bool ml__shared_over_limit(const struct ml__shared_totals *v);
void ml__shared_pressure_note(const struct ml__shared_totals *v);
void ml__shared_obey_request(struct ml__shared_table *t, bool wake);
void ml__shared_drop_requests(struct ml__shared_table *t,
                              const struct ml__shared_totals *v);
/* Sum; over the limit, post a stop request to the largest holder and wake
 * it; back under, drop the requests pending. */
void ml__shared_choose(struct ml__shared_table *t, bool full);

/* hooks.c: join the mapped table t of n slots (the join lock held),
 * installing the hooks: ML_OK, or ML_ENOMEM (no free slot), t unmapped. */
int ml__shared_join_table(struct ml__shared_table *t, uint32_t n,
                          const char *name, bool by_name);
/* hooks.c: this process's slot in t, claimed now if it has none yet (a
 * fork child, at its first fold, safe point or tree-limit check); a
 * failed claim (a full table) is said once and never retried: false from
 * then on.  The slot lock held; inside malloc. */
bool ml__shared_ensure_slot(struct ml__shared_table *t);

#pragma GCC visibility pop

#endif
