/* The table of a shared budget (docs/internals.md, "Shared budgets"):
 * opening and checking a by-name object, filling a new table in, the
 * SIGBUS guard of a by-name mapping, leaving a table (one lost under us
 * included), and the locks around it. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The table this process is a member of: set last at a join and cleared
 * first at a leave; the hooks use it only while holding the slot lock (a
 * try-lock: a thread that finds it taken skips, nobody waits on the
 * allocation path).  ml__shared_nslots and the mapping's extent are ours,
 * never read back from the table. */
struct ml__shared_table *_Atomic ml__shared_joined;
void *_Atomic ml__shared_map_base; /* for the SIGBUS handler */
_Atomic size_t ml__shared_map_len;
_Atomic bool ml__shared_map_lost; /* the object shrank under us */
char ml__shared_name[ML__SHARED_NAME_MAX + 1];

/* The join lock first, then the slot lock (both before the global list's
 * lock).  The slot lock guards this process's slot and the mapping's use:
 * the hooks only try it; a reader that waits on it waits for one
 * publication at most (it never blocks). */
ML__LOCK(, ml__shared_join_lock, ML__RANK_UNWIND)
ML__LOCK(, ml__shared_slot_lock, ML__RANK_UNWIND)

/* Slots for a table made now: MEMLIMITS_SHARED_SLOTS, read once at start
 * (ml__shared_from_env), else the default. */
uint32_t ml__shared_env_slots;

bool ml__shared_slot_count_ok(uint64_t n)
{
	return n >= 1 && n <= ML__SHARED_SLOTS_MAX;
}

/* Fill a new table in: the head's magic last, so that a joiner by name
 * that sees it sees the rest. */
void ml__shared_table_init(struct ml__shared_table *t, uint32_t n,
                           uint64_t limit)
{
	atomic_store(&t->head.layout, ML__SHARED_LAYOUT);
	atomic_store(&t->head.nslots, n);
	atomic_store(&t->head.limit, limit);
	atomic_store(&t->head.high_water, 0);
	atomic_store_explicit(&t->head.magic, ML__SHARED_MAGIC,
	                      memory_order_release);
}

int ml__shared_open_table(const char *name, uint64_t limit,
                          struct ml__shared_table **out, uint32_t *out_n)
{
	char obj[128];
	if (!ml__shared_object_name(name, obj, sizeof obj))
		return ML_EINVAL;
	int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (limit ? O_CREAT : 0);
	int fd = shm_open(obj, flags, 0600);
	if (fd < 0)
		return errno == ENOMEM || errno == EMFILE || errno == ENFILE ||
		               errno == ENOSPC
		           ? ML_ENOMEM
		           : ML_EINVAL;
	struct stat st;
	int rc = ML_EINVAL;
	bool fill = false;
	uint32_t n =
	    ml__shared_env_slots ? ml__shared_env_slots : ML__SHARED_SLOTS;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 077)) {
		errno = EACCES;
		goto out;
	}
	if (st.st_size == 0 && limit) {
		if (ftruncate(fd, (off_t)ml__shared_table_bytes(n)) != 0) {
			rc = ML_ENOMEM;
			goto out;
		}
		fill = true;
	} else {
		/* The slot count is the file's size; the head must agree. */
		if (st.st_size < (off_t)ml__shared_table_bytes(1) ||
		    (st.st_size - (off_t)sizeof(struct ml__shared_head)) %
		        (off_t)sizeof(struct ml__shared_slot))
			goto out;
		uint64_t k = (uint64_t)(st.st_size -
		                        (off_t)sizeof(struct ml__shared_head)) /
		             sizeof(struct ml__shared_slot);
		if (!ml__shared_slot_count_ok(k))
			goto out;
		n = (uint32_t)k;
	}
	if (fstat(fd, &st) != 0 ||
	    st.st_size != (off_t)ml__shared_table_bytes(n))
		goto out; /* changed meanwhile */
	void *p = ml__sys_mmap(NULL, ml__shared_table_bytes(n),
	                       PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = ML_ENOMEM;
		goto out;
	}
	struct ml__shared_table *t = p;
	if (fill) {
		ml__shared_table_init(t, n, limit);
	} else if (atomic_load_explicit(&t->head.magic, memory_order_acquire) !=
	               ML__SHARED_MAGIC ||
	           atomic_load(&t->head.layout) != ML__SHARED_LAYOUT ||
	           atomic_load(&t->head.nslots) != n ||
	           atomic_load(&t->head.limit) == 0) {
		/* Not made (yet), or another layout, or not a table. */
		ml__sys_munmap(p, ml__shared_table_bytes(n));
		goto out;
	} else if (limit) {
		atomic_store(&t->head.limit, limit);
	}
	*out = t;
	*out_n = n;
	rc = ML_OK;
out:
	close(fd);
	return rc;
}

/* ---- A table that shrank under us (by-name budgets) ---------------------- */

static struct sigaction sigbus_old;
static bool sigbus_installed;

static void sigbus_handler(int sig, siginfo_t *si, void *uc)
{
	/* si_addr means something only for a fault (si_code > 0); a
	 * SIGBUS sent with kill or sigqueue carries the sender there. */
	bool fault = si && si->si_code > 0;
	char *a = fault ? (char *)si->si_addr : NULL;
	char *m = atomic_load(&ml__shared_map_base);
	size_t len = atomic_load(&ml__shared_map_len);
	if (m && a >= m && a < m + len) {
		/* Zeros in place of the table: the access retries and
		 * reads an empty table, the next hook leaves it. */
		if (ml__sys_mmap(m, len, PROT_READ | PROT_WRITE,
		                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		                 0) != MAP_FAILED) {
			atomic_store(&ml__shared_map_lost, true);
			return;
		}
	}
	if (sigbus_old.sa_flags & SA_SIGINFO) {
		sigbus_old.sa_sigaction(sig, si, uc);
	} else if (sigbus_old.sa_handler != SIG_DFL &&
	           sigbus_old.sa_handler != SIG_IGN) {
		sigbus_old.sa_handler(sig);
	} else if (fault) {
		/* As without us: the fault comes back and kills. */
		signal(SIGBUS, SIG_DFL);
	} else if (sigbus_old.sa_handler == SIG_DFL) {
		/* Sent, not a fault: nothing comes back, so send it again
		 * to the default action (blocked in here: delivered as the
		 * handler returns). */
		signal(SIGBUS, SIG_DFL);
		raise(SIGBUS);
	} /* sent and ignored before us: ignored */
}

void ml__shared_sigbus_guard(void)
{
	if (sigbus_installed)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = sigbus_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigbus_installed = sigaction(SIGBUS, &sa, &sigbus_old) == 0;
}

/* Leave t (the slot lock held; the caller took t out of
 * ml__shared_joined). */
void ml__shared_leave_table(struct ml__shared_table *t)
{
	atomic_store(&ml__upcalls.fold, NULL);
	atomic_store(&ml__upcalls.held_moved, NULL);
	atomic_store(&ml__upcalls.safe_point, NULL);
	if (!atomic_load(&ml__shared_map_lost) &&
	    ml__shared_my_lineage == ml__lineage && ml__shared_slot_ours(t)) {
		struct ml__shared_figures v = {0};
		ml__shared_copy_write(&t->slot[ml__shared_my_slot], &v);
		ml__shared_slot_free(t, ml__shared_my_slot, ml__shared_my_tag);
	}
	ml__shared_my_slot = -1;
	ml__shared_name[0] = 0;
	atomic_store(&ml__shared_map_base, NULL);
	ml__sys_munmap(t, ml__shared_table_bytes(ml__shared_nslots));
}

/* The table shrank or was replaced under us (the slot lock held): leave it, say
 * so once, carry on with our own limits. */
static struct ml__shared_table *leave_lost(void)
{
	struct ml__shared_table *t = atomic_exchange(&ml__shared_joined, NULL);
	if (t) {
		ml__diag("shared budget %s: its table was truncated or "
		         "overwritten; this process leaves it and keeps its "
		         "own limits",
		         ml__shared_name[0] ? ml__shared_name : "(unnamed)");
		ml__shared_leave_table(t);
	}
	return NULL;
}

/* The table as the hooks see it (the slot lock held): NULL when none, or when
 * it was lost (shrunk, replaced: its magic gone), which leaves it. */
struct ml__shared_table *ml__shared_table_in_use(void)
{
	struct ml__shared_table *t = atomic_load(&ml__shared_joined);
	if (!t)
		return NULL;
	if (atomic_load_explicit(&ml__shared_map_lost, memory_order_relaxed) ||
	    atomic_load_explicit(&t->head.magic, memory_order_relaxed) !=
	        ML__SHARED_MAGIC)
		return leave_lost();
	return t;
}

uint64_t ml__shared_limit(void)
{
	ml__spin_lock(&ml__shared_slot_lock);
	struct ml__shared_table *t = ml__shared_table_in_use();
	uint64_t limit = t ? atomic_load(&t->head.limit) : 0;
	ml__spin_unlock(&ml__shared_slot_lock);
	return limit;
}

bool ml__shared_member(void)
{
	return atomic_load(&ml__shared_joined) != NULL;
}
