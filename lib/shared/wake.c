/* The wake of a shared budget (docs/internals.md, "Shared budgets"):
 * signalling the member a stop request names, its signal handler, which
 * trips the named task, and ml_shared_set_wake. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

uint64_t ml__shared_id_key; /* task identities: pointer ^ key */

/* The wake (ml_shared_set_wake): the signal, 0 none, -1 not set yet (the
 * default, ML_WAKE_DEFAULT, at the first join); the program's callback.
 * The default was SIGCONT until 0.5: it resumed a member that job control
 * or an operator had stopped (issue 41).  A real-time signal that glibc,
 * PostgreSQL 15 and nginx do not use disturbs nothing: it is sent only to
 * a member whose slot advertises it, which a slot does only while our
 * handler is on it (ml__shared_wake_signal), and a stopped member keeps
 * it pending until it is continued. */
static _Atomic int wake_sig = -1;
static _Atomic ml_wake_fn wake_fn;
static void *_Atomic wake_arg;
static int wake_installed;  /* the signal our handler is on, 0: none */
bool ml__shared_wake_asked; /* the program named the signal */
static struct sigaction wake_old;
/* A request the handler could not carry out (the global list's lock was
 * taken): done at the next fold or safe point. */
_Atomic uint64_t ml__shared_wake_deferred;

static void wake_handler(int sig, siginfo_t *si, void *uc);

/* The signal our slot advertises: only while our handler is on it, as
 * the kernel has it now (a program that put its own handler or SIG_DFL
 * on it since the join must not be sent a signal whose default action
 * ends it).  At a claim and at ml_shared_set_wake: one system call. */
int ml__shared_wake_signal(void)
{
	int s = atomic_load(&wake_sig);
	if (s <= 0 || s != wake_installed)
		return 0;
	int e = errno; /* a claim runs inside malloc */
	struct sigaction now;
	bool ours = sigaction(s, NULL, &now) == 0 &&
	            (now.sa_flags & SA_SIGINFO) &&
	            now.sa_sigaction == wake_handler;
	errno = e;
	return ours ? s : 0;
}

uint64_t ml__shared_task_id(const struct ml_task *task)
{
	return task ? ((uint64_t)(uintptr_t)task ^ ml__shared_id_key) | 1 : 0;
}

/* Interrupt the live global task whose identity is `id`, if it runs. */
void ml__shared_trip_named(struct ml_task *task, void *arg)
{
	struct ml__shared_trip_arg *a = arg;
	if (a->found || ml__shared_task_id(task) != a->id)
		return;
	a->found = true;
	if (atomic_load_explicit(&task->status, memory_order_relaxed) != ML_OK)
		return;
	task->shared_trip = true;
	if (ml__task_trip(task, ML_GLOBAL_LIMIT) != ML_GLOBAL_LIMIT)
		task->shared_trip = false; /* stopped for something else */
	else
		a->tripped = true;
}

/* Whether the request `id` still stands in our slot (the slot lock
 * held): a request dropped meanwhile (the total is back under) or
 * cleared (obeyed at a fold) is moot, and a wake for it stops nothing. */
static bool request_stands(struct ml__shared_table *t, uint64_t id)
{
	return t && !atomic_load(&ml__shared_map_lost) &&
	       ml__shared_my_lineage == ml__lineage &&
	       ml__shared_slot_ours(t) &&
	       atomic_load(&t->slot[ml__shared_my_slot].request) == id;
}

void ml__shared_wake_callback(void)
{
	ml_wake_fn fn = atomic_load(&wake_fn);
	if (fn)
		fn(atomic_load(&wake_arg));
}

void ml__shared_trip_deferred(struct ml__shared_table *t)
{
	if (!atomic_load_explicit(&ml__shared_wake_deferred,
	                          memory_order_relaxed))
		return;
	uint64_t id = atomic_exchange(&ml__shared_wake_deferred, 0);
	if (!id || !request_stands(t, id))
		return;
	struct ml__shared_trip_arg a = {id, false, false};
	ml__global_visit(ml__shared_trip_named, &a);
	if (a.tripped)
		ml__shared_wake_callback();
}

/* ---- Waking the target -------------------------------------------------- */

/* Send the slot's process its wake signal with the request's identity,
 * once we know it is the process that claimed the slot, in the image
 * that installed the handler: through a pidfd (opened first, so that the
 * checks and the signal reach the same process), or, on kernels before
 * 5.3, sigqueue after the same checks. */
void ml__shared_wake_target(struct ml__shared_table *t, int i, uint64_t id)
{
	struct ml__shared_slot *s = &t->slot[i];
	uint64_t tag = atomic_load(&s->tag);
	uint64_t sig = atomic_load(&s->wake);
	pid_t pid = ml__shared_tag_pid(tag);
	if (ml__shared_tag_state(tag) != ML__SHARED_LIVE || pid <= 0 ||
	    pid > ML__SHARED_PID_LIMIT || pid == ml__shared_my_pid ||
	    sig == 0 || sig > (uint64_t)SIGRTMAX || sig == SIGKILL ||
	    sig == SIGSTOP)
		return;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
#else
	int fd = -1;
	errno = ENOSYS;
#endif
	if (fd < 0 && errno != ENOSYS)
		return;
	bool known;
	if (!ml__shared_same_process(s, pid, &known) || !known) {
		if (fd >= 0)
			close(fd);
		return;
	}
	union sigval val = {.sival_ptr = (void *)(uintptr_t)id};
	if (fd < 0) {
		sigqueue(pid, (int)sig, val);
		return;
	}
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	siginfo_t si;
	memset(&si, 0, sizeof si);
	si.si_signo = (int)sig;
	si.si_code = SI_QUEUE;
	si.si_pid = ml__shared_my_pid;
	si.si_uid = getuid();
	si.si_value = val;
	syscall(SYS_pidfd_send_signal, fd, (int)sig, &si, 0);
#endif
	close(fd);
}

/* The wake signal's handler: a request sent by ml__shared_wake_target
 * (SI_QUEUE, the identity of one of our live tasks) interrupts that task
 * and calls the program's callback, when it acts: only while the request
 * still stands in our slot and the task still runs (a wake that arrives
 * after the request was dropped, or obeyed at a fold, stops nothing: the
 * signal can take longer than the request lives on a loaded machine).
 * The slot lock, taken with a try-lock, keeps the table mapped (a leave
 * takes it before unmapping); taken (a hook of ours runs, on this thread
 * or another) or the global list taken, the wake is deferred to the
 * hook's end or the next fold or safe point, which checks the same.
 * Async-signal-safe: atomics and try-locks. */
/* Whether a signal's default action ends the process (not: ignored, or
 * a stop). */
static bool ends_by_default(int sig)
{
	switch (sig) {
	case SIGCHLD:
	case SIGCONT:
	case SIGURG:
	case SIGWINCH:
	case SIGSTOP:
	case SIGTSTP:
	case SIGTTIN:
	case SIGTTOU:
		return false;
	default:
		return true;
	}
}

/* A signal of the wake's number that no member sent (kill(1), raise,
 * a terminal): what it did before our handler, so that being a member
 * changes nothing for it: the program's handler is called, SIG_IGN
 * ignores, and the default action is taken (a real-time signal's ends
 * the process: the handler's return delivers it again, at the default
 * action).  Async-signal-safe: sigaction and raise. */
static void stray(int sig, siginfo_t *si, void *uc)
{
	struct sigaction old = wake_old;
	if (old.sa_flags & SA_SIGINFO) {
		if (old.sa_sigaction)
			old.sa_sigaction(sig, si, uc);
		return;
	}
	if (old.sa_handler == SIG_IGN)
		return;
	if (old.sa_handler != SIG_DFL) {
		old.sa_handler(sig);
		return;
	}
	if (!ends_by_default(sig))
		return;
	int saved = errno;
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
	raise(sig); /* blocked here: delivered when the handler returns */
	errno = saved;
}

static void wake_handler(int sig, siginfo_t *si, void *uc)
{
	if (!si || si->si_code != SI_QUEUE ||
	    !atomic_load(&ml__shared_joined)) {
		stray(sig, si, uc); /* not a member's: kill(1), a terminal */
		return;
	}
	int saved = errno;
	uint64_t id = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	struct ml__shared_trip_arg a = {id, false, false};
	if (!ml__spin_trylock(&ml__shared_slot_lock)) {
		atomic_store(&ml__shared_wake_deferred, id);
		errno = saved;
		return;
	}
	if (request_stands(atomic_load(&ml__shared_joined), id) &&
	    !ml__global_try_visit(ml__shared_trip_named, &a))
		atomic_store(&ml__shared_wake_deferred, id);
	ml__spin_unlock(&ml__shared_slot_lock);
	if (a.tripped)
		ml__shared_wake_callback();
	errno = saved;
}

/* Install or remove our handler so that it is on wake_sig (the join lock
 * held).  At a join with the default signal, a program's own handler on
 * it is left alone (the member is then not woken, and says so); a signal
 * named by ml_shared_set_wake is taken. */
void ml__shared_wake_install(bool asked)
{
	int want = atomic_load(&wake_sig);
	if (want < 0)
		want = ML_WAKE_DEFAULT, atomic_store(&wake_sig, want);
	if (want == wake_installed)
		return;
	if (wake_installed) {
		sigaction(wake_installed, &wake_old, NULL);
		wake_installed = 0;
	}
	if (!want)
		return;
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = wake_handler;
	/* SA_RESTART: a read on a pipe or socket goes on waiting (the
	 * program's callback wakes it); nanosleep, poll, ppoll, epoll_wait
	 * and select return EINTR whatever the flag, so a member waiting
	 * there sees its stop at once.  Whatever the signal's number. */
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	/* The handler reads our slot: a truncated object's fault there is
	 * the SIGBUS guard's to turn into zeros (blocked, it would kill). */
	sigdelset(&sa.sa_mask, SIGBUS);
	if (sigaction(want, NULL, &old) != 0)
		return;
	bool ours =
	    (old.sa_flags & SA_SIGINFO) && old.sa_sigaction == wake_handler;
	bool theirs =
	    !ours && ((old.sa_flags & SA_SIGINFO) ||
	              (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN));
	if (!asked && theirs) {
		ml__diag("shared budget: signal %d has a handler of the "
		         "program's: this member is not woken when asked to "
		         "stop (ml_shared_set_wake(3))",
		         want);
		return;
	}
	if (ours) {
		memset(&wake_old, 0, sizeof wake_old);
		wake_old.sa_handler = SIG_DFL;
		wake_installed = want;
	} else if (sigaction(want, &sa, &wake_old) == 0) {
		wake_installed = want;
	}
}

int ml__shared_set_wake(int signo, ml_wake_fn fn, void *arg)
{
	if (signo < -1 || signo > SIGRTMAX || signo == SIGKILL ||
	    signo == SIGSTOP || signo == SIGSEGV || signo == SIGBUS ||
	    signo == SIGILL || signo == SIGFPE || signo == SIGABRT ||
	    signo == SIGTRAP || signo == SIGSYS)
		return ML_EINVAL;
	ml__spin_lock(&ml__shared_join_lock);
	atomic_store(&wake_arg, arg);
	atomic_store(&wake_fn, fn);
	if (signo >= 0) {
		ml__shared_wake_asked = true;
		atomic_store(&wake_sig, signo);
		if (atomic_load(&ml__shared_joined))
			ml__shared_wake_install(true);
	}
	/* Our slot says whether we can be woken, and by what. */
	ml__spin_lock(&ml__shared_slot_lock);
	struct ml__shared_table *t = atomic_load(&ml__shared_joined);
	if (t && ml__shared_slot_ours(t))
		atomic_store(&t->slot[ml__shared_my_slot].wake,
		             (uint64_t)ml__shared_wake_signal());
	ml__spin_unlock(&ml__shared_slot_lock);
	ml__spin_unlock(&ml__shared_join_lock);
	return ML_OK;
}
