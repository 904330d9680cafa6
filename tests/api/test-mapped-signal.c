/* Issue 41, item 2: the mmap family under a signal handler that maps
 * memory, and no lock across its system calls.
 *
 *  - test_handler: signal-maps.h's loop (big mappings cut, protected,
 *    moved and unmapped, a SIGALRM every 100 us whose handler maps,
 *    unmaps, mallocs and frees) ends, with the library linked; before, the
 *    handler spun for ever on the ranges' lock its own thread held (the
 *    case's time limit fails it), and the count is back to nothing;
 *  - test_blocked_munmap: while one thread is inside munmap's system call,
 *    held there by a seccomp user notification (no clock: the supervisor
 *    sees the thread in the call), another thread maps, cuts, protects,
 *    moves and unmaps, and all of it completes before the first call is
 *    let go; before, the second thread's first mmap waited for ever for
 *    the lock the first held across its munmap. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <memlimits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../tap/tap.h"
#include "signal-maps.h"

static int64_t mapped(void)
{
	struct mallinfo2 mi = mallinfo2();
	return (int64_t)ml_global_memory_usage() -
	       (int64_t)(mi.uordblks + mi.hblkhd);
}

static void test_handler(void)
{
	int64_t base = mapped();
	int bad = signal_loop(400);
	tap_ok(bad == 0 && sig_runs > 0,
	       "400 rounds of big mappings under SIGALRM every 100 us, the "
	       "handler mapping and mallocing: done (step %d failed; %d "
	       "handler runs)",
	       bad, (int)sig_runs);
	tap_is(mapped() - base, 0, "and nothing counted after");
}

/* A length no other call uses: the filter traps munmap of it only. */
#define TRAPPED ((size_t)0x3330000)

struct blocked {
	char *p;
	int fd;
	pthread_barrier_t ready;
	int r, err;
};

static void *unmapper(void *arg)
{
	struct blocked *b = arg;
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	             offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_munmap, 0, 3),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	             offsetof(struct seccomp_data, args[1])),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)TRAPPED, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	/* This thread only (no TSYNC): the others' calls run free. */
	b->fd = -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
		b->fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
		                     SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	pthread_barrier_wait(&b->ready);
	if (b->fd < 0)
		return NULL;
	b->r = munmap(b->p, TRAPPED);
	b->err = errno;
	return NULL;
}

static void test_blocked_munmap(void)
{
	int64_t base = mapped();
	struct blocked b = {0};
	b.p = mmap(NULL, TRAPPED, PROT_READ | PROT_WRITE,
	           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b.p == MAP_FAILED)
		tap_bail("mmap: %s", strerror(errno));
	b.p[0] = 1;
	pthread_barrier_init(&b.ready, NULL, 2);
	pthread_t th;
	pthread_create(&th, NULL, unmapper, &b);
	pthread_barrier_wait(&b.ready);
	if (b.fd < 0) {
		pthread_join(th, NULL);
		munmap(b.p, TRAPPED);
		tap_skip(2, "no seccomp user notification here");
		return;
	}
	struct seccomp_notif n;
	memset(&n, 0, sizeof n);
	/* Returns once the other thread is inside munmap's system call. */
	if (ioctl(b.fd, SECCOMP_IOCTL_NOTIF_RECV, &n) != 0)
		tap_bail("SECCOMP_IOCTL_NOTIF_RECV: %s", strerror(errno));
	int done = 0;
	for (int i = 0; i < 100; i++) {
		char *p = mmap(NULL, 4 * SIG_MIB, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			break;
		p[0] = 1;
		if (mprotect(p, SIG_MIB, PROT_READ) != 0 ||
		    munmap(p + SIG_MIB, SIG_MIB) != 0)
			break;
		char *q = mremap(p, SIG_MIB, 2 * SIG_MIB, MREMAP_MAYMOVE);
		if (q == MAP_FAILED)
			break;
		munmap(q, 2 * SIG_MIB);
		munmap(p + 2 * SIG_MIB, 2 * SIG_MIB);
		done++;
	}
	tap_is(done, 100,
	       "while another thread is inside munmap's system call, 100 "
	       "rounds of mmap, mprotect, munmap and mremap complete");
	struct seccomp_notif_resp resp;
	memset(&resp, 0, sizeof resp);
	resp.id = n.id;
	resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	if (ioctl(b.fd, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0)
		tap_bail("SECCOMP_IOCTL_NOTIF_SEND: %s", strerror(errno));
	pthread_join(th, NULL);
	tap_ok(b.r == 0 && mapped() - base == 0,
	       "then that munmap completes and the count is back (%d, %lld)",
	       b.r, (long long)(mapped() - base));
}

int main(void)
{
	tap_case("test_handler", test_handler, 120);
	tap_case("test_blocked_munmap", test_blocked_munmap, 60);
	return tap_done();
}
