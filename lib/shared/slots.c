/* Slots of a shared budget's table (docs/internals.md, "Shared budgets"):
 * this process's identity and slot, claiming and freeing by CAS, the
 * sweep of dead members (pids, start times, exec tokens in /proc), and
 * the two copies a slot publishes through seq. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint32_t ml__shared_nslots;
int ml__shared_my_slot = -1;     /* -1: none yet (a fork child claims lazily) */
uint64_t ml__shared_my_tag;      /* the tag our slot has while it is ours */
uint64_t ml__shared_my_start;    /* our start time */
uint64_t ml__shared_my_token;    /* our image's exec token */
pid_t ml__shared_my_pid;         /* getpid() of this lineage */
uint32_t ml__shared_my_lineage;  /* ml__lineage when the above were set */
uint64_t ml__shared_inherited;   /* heap inherited at a fork: not ours */
uint64_t ml__shared_summed_heap; /* our heap as the last sum read it */
uint64_t ml__shared_last_stopping, ml__shared_stopping_since;
/* A claim failed (a full table): never retried, said once. */
bool ml__shared_claim_failed;

uint64_t ml__shared_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- Processes --------------------------------------------------------- */

/* A process's start time, exec token and whether it is a zombie, from
 * /proc/PID/stat: field 22, the start time; fields 26-28 and 45-47, the
 * image's code, stack, data and brk start addresses, which every exec
 * sets anew (randomised, and another program's differ anyway) and
 * nothing else changes (the argument and environment fields, which
 * prctl(PR_SET_MM) can move, are left out), hashed into the token; 0
 * when the kernel hides them (another user, a process that is not
 * dumpable).  Fields counted after the last ')'.  1: read; 0: no such
 * process; -1: cannot tell.  No stdio, no malloc: async-signal-safe. */
static int proc_stat(pid_t pid, uint64_t *start, uint64_t *token)
{
	char path[48] = "/proc/", num[ML__UTOA_BYTES];
	strcat(path, ml__utoa((uint64_t)pid, 10, num));
	strcat(path, "/stat");
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? 0 : -1;
	char buf[1024];
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return n == 0 ? 0 : -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -1;
	p += 2; /* field 3, the state */
	if (*p == 'Z' || *p == 'X' || *p == 'x')
		return 0;
	uint64_t tok = 0, any = 0;
	for (int field = 3; field <= 47; field++) {
		if (field > 3) {
			p = strchr(p, ' ');
			if (!p)
				break;
			p++;
		}
		if (field != 22 && !(field >= 26 && field <= 28) &&
		    !(field >= 45 && field <= 47))
			continue;
		uint64_t v = 0;
		for (char *q = p; *q >= '0' && *q <= '9'; q++)
			v = v * 10 + (uint64_t)(*q - '0');
		if (field == 22) {
			*start = v;
			if (!token)
				return 1;
			continue;
		}
		any |= v;
		tok = (tok ^ v) * 0x100000001b3ull;
	}
	if (token)
		*token = any ? tok | 1 : 0;
	return 1;
}

/* The slot's process as /proc has it now is the one that claimed it:
 * same start time and, where both are known, the same image. */
bool ml__shared_same_process(struct ml__shared_slot *s, pid_t pid, bool *known)
{
	uint64_t start = 0, token = 0;
	int r = proc_stat(pid, &start, &token);
	*known = r >= 0;
	if (r <= 0)
		return r < 0; /* gone: false; cannot tell: true */
	uint64_t want =
	    atomic_load_explicit(&s->exec_tok, memory_order_relaxed);
	if (start != atomic_load_explicit(&s->start, memory_order_relaxed))
		return false;
	return !want || !token || want == token;
}

/* Is the member of slot i, whose tag is `tag`, alive?  `full`: also check
 * its start time, exec token and zombie state in /proc. */
bool ml__shared_member_alive(struct ml__shared_table *t, int i, uint64_t tag,
                             bool full)
{
	pid_t pid = ml__shared_tag_pid(tag);
	if (pid <= 0 || pid > ML__SHARED_PID_LIMIT)
		return false;
	if (pid == ml__shared_my_pid)
		return i ==
		       ml__shared_my_slot; /* one slot per process: any other is
		                   a stale one of an image before exec */
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return false;
	if (!full || ml__shared_tag_state(tag) != ML__SHARED_LIVE)
		return true; /* a claim writes start late */
	bool known;
	return ml__shared_same_process(&t->slot[i], pid, &known);
}

/* Free slot i (its member is gone), unless its tag changed meanwhile. */
void ml__shared_slot_free(struct ml__shared_table *t, int i, uint64_t tag)
{
	atomic_compare_exchange_strong(
	    &t->slot[i].tag, &tag,
	    ml__shared_tag_make(0, tag, ML__SHARED_FREE));
}

uint32_t ml__shared_slots_used(struct ml__shared_table *t)
{
	uint32_t high =
	    atomic_load_explicit(&t->head.high_water, memory_order_relaxed);
	return high < ml__shared_nslots ? high : ml__shared_nslots;
}

void ml__shared_raise_high_water(struct ml__shared_table *t, uint32_t n)
{
	uint32_t high = atomic_load(&t->head.high_water);
	while ((high < n || high > ml__shared_nslots) &&
	       !atomic_compare_exchange_weak(&t->head.high_water, &high, n))
		;
}

/* The process's identity for this lineage (a fork child has its own). */
bool ml__shared_know_self(void)
{
	if (ml__shared_my_pid && ml__shared_my_lineage == ml__lineage)
		return true;
	ml__shared_my_pid = getpid();
	ml__shared_my_lineage = ml__lineage;
	ml__shared_my_token = 0;
	return proc_stat(ml__shared_my_pid, &ml__shared_my_start,
	                 &ml__shared_my_token) == 1;
}

/* Claim a free slot, advertising the wake signal `signo`: ML_OK or ML_ENOMEM
 * (none free). */
int ml__shared_claim(struct ml__shared_table *t, int signo)
{
	if (!ml__shared_know_self())
		ml__shared_my_start = ml__shared_my_token = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < ml__shared_nslots; i++) {
			struct ml__shared_slot *s = &t->slot[i];
			uint64_t tag = atomic_load(&s->tag);
			if (ml__shared_tag_state(tag) != ML__SHARED_FREE) {
				/* The second pass sweeps the dead. */
				if (pass && !ml__shared_member_alive(t, (int)i,
				                                     tag, true))
					ml__shared_slot_free(t, (int)i, tag);
				tag = atomic_load(&s->tag);
				if (ml__shared_tag_state(tag) !=
				    ML__SHARED_FREE)
					continue;
			}
			uint64_t mine = ml__shared_tag_make(
			    ml__shared_my_pid, tag, ML__SHARED_CLAIMING);
			if (!atomic_compare_exchange_strong(&s->tag, &tag,
			                                    mine))
				continue;
			atomic_store(&s->start, ml__shared_my_start);
			atomic_store(&s->exec_tok, ml__shared_my_token);
			atomic_store(&s->request, 0);
			atomic_store(&s->req_time, 0);
			atomic_store(&s->wake, (uint64_t)signo);
			memset((void *)s->copy, 0, sizeof s->copy);
			atomic_store(&s->seq, 0);
			ml__shared_my_tag =
			    (mine & ~(uint64_t)3) | ML__SHARED_LIVE;
			atomic_store(&s->tag, ml__shared_my_tag);
			ml__shared_my_slot = (int)i;
			ml__shared_summed_heap = 0;
			ml__shared_last_stopping = ml__shared_stopping_since =
			    0;
			ml__shared_raise_high_water(t, i + 1);
			return ML_OK;
		}
	}
	return ML_ENOMEM;
}

/* Our slot is still ours (nobody swept or overwrote it). */
bool ml__shared_slot_ours(struct ml__shared_table *t)
{
	return ml__shared_my_slot >= 0 &&
	       (uint32_t)ml__shared_my_slot < ml__shared_nslots &&
	       atomic_load_explicit(&t->slot[ml__shared_my_slot].tag,
	                            memory_order_relaxed) == ml__shared_my_tag;
}

/* ---- The two copies ---------------------------------------------------- */

/* Write the copy seq does not name, then name it (one writer per slot:
 * its member, under the slot lock).  The fence keeps this round's stores after
 * the last round's seq, which readers check. */
void ml__shared_copy_write(struct ml__shared_slot *s,
                           const struct ml__shared_figures *v)
{
	uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
	struct ml__shared_copy *c = &s->copy[(q + 1) & 1];
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&c->heap, v->heap, memory_order_relaxed);
	atomic_store_explicit(&c->top_held, v->top_held, memory_order_relaxed);
	atomic_store_explicit(&c->top_id, v->top_id, memory_order_relaxed);
	atomic_store_explicit(&c->stopping, v->stopping, memory_order_relaxed);
	atomic_store_explicit(&c->stop_since, v->stop_since,
	                      memory_order_relaxed);
	atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

/* The copy in force, untorn: false if the writer kept moving (16 rounds
 * during one read: only a table written by something else). */
bool ml__shared_copy_read(struct ml__shared_slot *s,
                          struct ml__shared_figures *v)
{
	for (int tries = 0; tries < 16; tries++) {
		uint64_t q =
		    atomic_load_explicit(&s->seq, memory_order_acquire);
		struct ml__shared_copy *c = &s->copy[q & 1];
		v->heap = atomic_load_explicit(&c->heap, memory_order_relaxed);
		v->top_held =
		    atomic_load_explicit(&c->top_held, memory_order_relaxed);
		v->top_id =
		    atomic_load_explicit(&c->top_id, memory_order_relaxed);
		v->stopping =
		    atomic_load_explicit(&c->stopping, memory_order_relaxed);
		v->stop_since =
		    atomic_load_explicit(&c->stop_since, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q)
			return true;
	}
	return false;
}
