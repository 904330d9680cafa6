/* ml_set_frame_source and ml_frame_name (issue 43, item 6): a frame
 * source rewrites the stacks captured at samples, and its named frames
 * print as their text in held profiles, between the C frames it kept;
 * the source sees the program's frames only, runs at samples only and
 * only while capture is on; a result out of range keeps the stack; NULL
 * removes it.  No statistics: at S = 4096 each site holds 1.2 MB, about
 * 290 samples, and a site with none has probability e^-290. */
#define _GNU_SOURCE
#include <memlimits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap/tap.h"

#define S 4096u
#define BLOCKS 600
#define BLOCK 2000

static void *blocks[BLOCKS];

__attribute__((noinline)) void hold_here(void);
__attribute__((noinline)) void hold_here(void)
{
	for (int i = 0; i < BLOCKS; i++)
		blocks[i] = malloc(BLOCK);
	__asm__ volatile("" ::: "memory"); /* keep the frame a caller */
}

static void *run_hold(void *arg)
{
	(void)arg;
	hold_here();
	return NULL;
}

static void free_all(void)
{
	for (int i = 0; i < BLOCKS; i++) {
		free(blocks[i]);
		blocks[i] = NULL;
	}
}

/* The sources.  Each counts its calls; what it does is set here. */
static _Atomic int calls;
static uintptr_t named_a, named_b;
enum mode { REPLACE_INNERMOST, PREPEND_TWO, BAD_RESULT };
static enum mode mode;

static int source(uintptr_t *frames, int n, int max, void *arg)
{
	atomic_fetch_add(&calls, 1);
	if (arg != &mode)
		return -1;
	switch (mode) {
	case REPLACE_INNERMOST:
		frames[0] = named_a;
		return n;
	case PREPEND_TWO:
		if (n + 2 > max)
			n = max - 2;
		memmove(frames + 2, frames, (size_t)n * sizeof *frames);
		frames[0] = named_a;
		frames[1] = named_b;
		return n + 2;
	case BAD_RESULT:
		frames[0] = named_b; /* ignored: the result is out of range */
		return max + 1;
	}
	return n;
}

static char buf[1 << 17];
static void profile(const ml_task *t)
{
	char path[] = "/tmp/ml-frame-source.XXXXXX";
	int fd = mkstemp(path);
	buf[0] = 0;
	if (fd < 0)
		return;
	unlink(path);
	ml_write_held_profile(t, fd);
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
}

/* Every line's innermost frames (frame k from the inside, 0 innermost)
 * are want[0..k): how many bytes match, of how many in all. */
static uint64_t matching(const char *const *want, int k, uint64_t *total)
{
	uint64_t match = 0;
	*total = 0;
	char copy[sizeof buf];
	memcpy(copy, buf, sizeof buf);
	for (char *line = copy, *end; *line; line = end + 1) {
		end = strchr(line, '\n');
		if (!end)
			break;
		*end = 0;
		char *sp = strrchr(line, ' ');
		if (!sp)
			continue;
		uint64_t v = strtoull(sp + 1, NULL, 10);
		*sp = 0;
		*total += v;
		int ok = 1;
		for (int i = 0; i < k && ok; i++) {
			char *semi = strrchr(line, ';');
			const char *f = semi ? semi + 1 : line;
			ok = !strcmp(f, want[i]);
			if (semi)
				*semi = 0;
			else
				line[0] = 0;
		}
		if (ok)
			match += v;
	}
	return match;
}

static uint64_t held_with(ml_frame_source_fn fn, void *arg, int *ncalls)
{
	ml_set_frame_source(fn, arg);
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	atomic_store(&calls, 0);
	ml_task_run(t, run_hold, NULL, NULL);
	*ncalls = atomic_load(&calls);
	profile(t);
	uint64_t held = ml_task_held(t);
	free_all();
	ml_task_free(t);
	ml_set_frame_source(NULL, NULL);
	return held;
}

static void test_names(void)
{
	uintptr_t a = ml_frame_name("lua:run:3", 9);
	uintptr_t a2 = ml_frame_name("lua:run:3 and more", 9);
	uintptr_t b = ml_frame_name("lua:run:4", 9);
	tap_ok(a != 0 && a == a2 && b != 0 && a != b,
	       "the same text gives the same frame, another text another");
	tap_ok((a >> (sizeof a * 8 - 1)) == 1,
	       "a named frame has the top bit set (no return address has)");
	tap_ok(ml_frame_name(NULL, 3) == 0, "NULL: 0");
	char longer[400];
	memset(longer, 'x', sizeof longer);
	uintptr_t l1 = ml_frame_name(longer, sizeof longer);
	longer[300] = 'y';
	tap_ok(l1 != 0 && ml_frame_name(longer, sizeof longer) == l1 &&
	           ml_frame_name(longer, 255) == l1,
	       "names are cut to 255 bytes");
}

static void test_source(void)
{
	if (!(ml_capabilities() & ML_CAP_STACKS)) {
		tap_skip(6, "no call stacks in this process");
		return;
	}
	/* ';' and a newline would break the format: written as ':' and a
	 * blank. */
	named_a = ml_frame_name("script.lua:load;rows\n:12", 24);
	named_b = ml_frame_name("script.lua:main:30", 18);
	const char *a = "script.lua:load:rows :12", *b = "script.lua:main:30";
	int n;
	uint64_t total;

	ml_set_stack_capture(false);
	held_with(source, &mode, &n);
	tap_is_int(n, 0, "capture off: the source is never called");

	ml_set_stack_capture(true);
	mode = REPLACE_INNERMOST;
	uint64_t held = held_with(source, &mode, &n);
	const char *want1[] = {a, "run_hold"};
	uint64_t m = matching(want1, 2, &total);
	tap_ok(held > 0 && m == held && total == held,
	       "the innermost frame (hold_here) replaced by a named frame, "
	       "its caller kept after it: %llu of %llu bytes",
	       (unsigned long long)m, (unsigned long long)held);
	/* About 290 samples of 600 allocations: called at samples only. */
	tap_ok(n > 0 && n < BLOCKS,
	       "called at samples only: %d times for %d allocations", n,
	       BLOCKS);

	mode = PREPEND_TWO;
	held = held_with(source, &mode, &n);
	const char *want2[] = {a, b, "hold_here", "run_hold"};
	m = matching(want2, 4, &total);
	tap_ok(held > 0 && m == held,
	       "two named frames put inside the program's own, which follow "
	       "(%llu of %llu bytes)",
	       (unsigned long long)m, (unsigned long long)held);

	mode = BAD_RESULT;
	held = held_with(source, &mode, &n);
	const char *want3[] = {"hold_here", "run_hold"};
	m = matching(want3, 2, &total);
	tap_ok(held > 0 && m == held && n > 0,
	       "a result above max: the stack as captured (%llu of %llu)",
	       (unsigned long long)m, (unsigned long long)held);

	held = held_with(NULL, NULL, &n);
	m = matching(want3, 2, &total);
	tap_ok(held > 0 && m == held && n == 0,
	       "no source: the stack as captured, nothing called");

	ml_set_stack_capture(false);
}

int main(void)
{
	ml_set_sample_interval(S);
	ml_set_seed(11);
	tap_is_int(ml_set_frame_source(NULL, NULL), ML_OK,
	           "ml_set_frame_source(NULL): ML_OK");
	tap_case("test_names", test_names, 30);
	tap_case("test_source", test_source, 60);
	return tap_done();
}
