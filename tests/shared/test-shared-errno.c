/* Issue 41 (1): the malloc family keeps errno in a member of a shared
 * budget whose other members have exited.  The fold hook sums the table
 * and finds each dead member with kill(pid, 0), which sets errno to
 * ESRCH: free() and malloc() returned with it, once per exited member
 * (the house rule is tests/api/test-family.c's: no call of the family
 * changes errno unless it fails).
 *
 * Under ASan or TSan the library's malloc is bypassed: the blocks are
 * also noted through ml_note_alloc / ml_note_free, which fold the meter
 * the same way, and errno is checked across the pair. */
#define _GNU_SOURCE
#include "memlimits.h"
#include "../tap/tap.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipes.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define MEMBERS 10
#define SENT 4242 /* errno before every call: "untouched" is visible */
#define BLOCK (64 * KiB)
#define BLOCKS 128 /* 8 MiB a round: the heap moves by more than a batch */
#define ROUNDS 64  /* at least ML__SHARED_FULL_EVERY sums, many times over */

static void *volatile sink;
static bool noted;

static void *take(size_t n)
{
	void *p = malloc(n);
	if (p && noted)
		ml_note_alloc(n);
	return p;
}

static void give(void *p, size_t n)
{
	if (p && noted)
		ml_note_free(n);
	free(p);
}

/* A member by fork: its folds claim its slot; it says so, then exits. */
static void member(int ready)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	static void *b[32];
	for (int i = 0; i < 32; i++)
		sink = b[i] = take(BLOCK);
	for (int i = 0; i < 32; i++)
		give(b[i], BLOCK);
	ml_check(); /* a safe point claims the slot if no fold did */
	put(ready, "r", 1);
	_exit(0);
}

static void test_errno_dead_members(void)
{
	tap_is(ml_shared_create(1024 * MiB, 0), ML_OK,
	       "a budget with no name is made");
	int ready[2];
	if (pipe(ready))
		tap_bail("pipe");
	pid_t pid[MEMBERS];
	for (int i = 0; i < MEMBERS; i++) {
		pid[i] = fork();
		if (pid[i] < 0)
			tap_bail("fork");
		if (pid[i] == 0) {
			close(ready[0]);
			member(ready[1]);
		}
	}
	close(ready[1]);
	int said = 0;
	char c;
	while (said < MEMBERS && get(ready[0], &c, 1))
		said++;
	close(ready[0]);
	tap_is(said, MEMBERS, "every member claimed its slot");
	/* Read before any member is reaped: a zombie still answers
	 * kill(pid, 0), so every slot is a live member's here. */
	size_t before = ml_shared_members(NULL, 0);
	tap_ok(before == MEMBERS + 1,
	       "the table has the parent and its %d members (%zu)", MEMBERS,
	       before);
	int exited = 0;
	for (int i = 0; i < MEMBERS; i++) {
		int st;
		if (waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st) &&
		    WEXITSTATUS(st) == 0)
			exited++;
	}
	tap_is(exited, MEMBERS, "the members exited and were reaped");

	/* Now every fold that sums the table finds dead members. */
	static void *b[BLOCKS];
	long calls = 0, changed = 0;
	int first = 0;
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < BLOCKS; i++) {
			errno = SENT;
			sink = b[i] = take(BLOCK);
			calls++;
			if (errno != SENT && b[i] && !changed++)
				first = errno;
		}
		for (int i = 0; i < BLOCKS; i++) {
			errno = SENT;
			give(b[i], BLOCK);
			calls++;
			if (errno != SENT && !changed++)
				first = errno;
		}
	}
	tap_ok(changed == 0,
	       "malloc and free keep errno across folds that sweep %d dead "
	       "members (%ld of %ld calls changed it, the first to %d)",
	       MEMBERS, changed, calls, first);
	tap_is(ml_shared_members(NULL, 0), 1, "the dead members are gone");
	tap_is(ml_shared_leave(), ML_OK, "the parent leaves");
}

int main(void)
{
	noted = !(ml_capabilities() & ML_CAP_INTERPOSED);
	if (tap_under_valgrind()) {
		tap_skip(1, "member processes under valgrind (as test-shared)");
		return tap_done();
	}
	tap_case("test_errno_dead_members", test_errno_dead_members, 120);
	return tap_done();
}
