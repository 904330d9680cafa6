/* A process of tests/cli/test-tree-limit.sh: allocates MiB mebibytes in
 * one block and holds them until every process named has allocated (or
 * been refused), so that all hold at once.
 *
 *   test-tree-alloc DIR NAME MIB AFTER|- NAME...
 *
 * Writes DIR/NAME.start, then waits for DIR/AFTER.done (unless AFTER is
 * -), so that the order of the allocations is fixed; says "NAME pid P:
 * allocated" or "refused", and, under a shared budget, the members' total and
 * the limit as ml_shared_usage and ml_shared_limit give them (found in the
 * preloaded library); writes DIR/NAME.done; waits for DIR/N.done of each N
 * named; exits 0 when allocated, 1 when refused.  Not linked with the library:
 * memlimits run preloads it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;

static int done(const char *dir, const char *name)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s.done", dir, name);
	return access(p, F_OK) == 0;
}

static void wait_for(const char *dir, const char *name)
{
	struct timespec ts = {0, 5 * 1000 * 1000};
	/* A safety stop only (60 s), not a threshold of the test. */
	for (int i = 0; i < 12000 && !done(dir, name); i++)
		/* not ordering: the poll of a wait on a file */
		nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s DIR NAME MIB AFTER|- NAME...\n",
		        argv[0]);
		return 2;
	}
	const char *dir = argv[1], *name = argv[2];
	size_t mib = strtoul(argv[3], NULL, 10);
	/* Started (a member, or under no budget): DIR/NAME.start. */
	char sp[4096];
	snprintf(sp, sizeof sp, "%s/%s.start", dir, name);
	int sfd = open(sp, O_WRONLY | O_CREAT, 0644);
	if (sfd >= 0)
		close(sfd);
	if (strcmp(argv[4], "-"))
		wait_for(dir, argv[4]);
	sink = malloc(mib << 20);
	int refused = sink == NULL;
	if (sink)
		memset(sink, 1, 4096);
	uint64_t (*usage)(void) =
	    (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "ml_shared_usage");
	uint64_t (*limit)(void) =
	    (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "ml_shared_limit");
	printf("%s pid %ld: %s\n", name, (long)getpid(),
	       refused ? "refused" : "allocated");
	if (usage && limit)
		printf("%s total %llu limit %llu\n", name,
		       (unsigned long long)usage(),
		       (unsigned long long)limit());
	fflush(stdout);
	char p[4096];
	snprintf(p, sizeof p, "%s/%s.done", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
	for (int i = 5; i < argc; i++)
		wait_for(dir, argv[i]);
	/* All hold now: the total as every member sees it. */
	if (usage && limit)
		printf("%s holding: total %llu limit %llu\n", name,
		       (unsigned long long)usage(),
		       (unsigned long long)limit());
	free(sink);
	return refused;
}
