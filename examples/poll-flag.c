/* FLAG delivery: the library only raises a flag; the task polls
 * ml_is_interrupted() at points of its choosing, stops itself and returns
 * whatever it has (here: the best answer found so far), freeing its own
 * memory on the way out.  Two ways to be stopped: a timer thread sets the
 * task's token (a deadline), or the task's allocation limit is reached.
 * Build: cc poll-flag.c $(pkg-config --cflags --libs memlimits) -lpthread */
#define _GNU_SOURCE
#include <memlimits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The longest Collatz chain starting below `limit`, with a memo of chain
 * lengths that grows with the numbers tried (memory grows as it works). */
struct search {
	uint64_t limit;
	size_t memo_max; /* 0: let the memo grow without bound */
	/* results */
	uint64_t tried, best_start;
	uint32_t best_len;
	int stopped_early;
};

static uint32_t chain(uint64_t n, const uint32_t *memo, size_t memo_len)
{
	uint32_t len = 0;
	while (n != 1) {
		if (n < memo_len && memo[n])
			return len + memo[n];
		n = (n & 1) ? 3 * n + 1 : n / 2;
		len++;
	}
	return len + 1;
}

static void *search(void *arg)
{
	struct search *s = arg;
	uint32_t *memo = NULL;
	size_t memo_len = 0;
	for (uint64_t n = 1; n < s->limit; n++) {
		/* The poll: cheap (a few loads), so every 4096 numbers. */
		if ((n & 4095) == 0 && ml_is_interrupted()) {
			s->stopped_early = 1;
			break;
		}
		if ((s->memo_max == 0 || memo_len < s->memo_max) &&
		    n >= memo_len) {
			size_t len = memo_len ? memo_len * 2 : 4096;
			uint32_t *m = realloc(memo, len * sizeof *m);
			if (!m) /* FLAG delivery never fails an allocation, */
				break; /* but the machine may */
			for (size_t i = memo_len; i < len; i++)
				m[i] = 0;
			memo = m;
			memo_len = len;
		}
		uint32_t len = chain(n, memo, memo_len);
		if (n < memo_len)
			memo[n] = len;
		if (len > s->best_len) {
			s->best_len = len;
			s->best_start = n;
		}
		s->tried = n;
	}
	free(memo); /* the task cleans up after itself */
	return s;
}

struct timer {
	ml_token *token;
	long ms;
};

static void *timer(void *arg)
{
	struct timer *t = arg;
	struct timespec ts = {t->ms / 1000, t->ms % 1000 * 1000000};
	nanosleep(&ts, NULL);
	ml_token_set(t->token); /* from another thread: fine */
	return NULL;
}

static int report(const char *what, ml_status s, const ml_outcome *out)
{
	const struct search *r = out->ret; /* FLAG: fn always returns */
	printf("%-28s %s after %llu numbers: longest chain so far starts "
	       "at %llu (%u steps)%s\n",
	       what, ml_status_str(s), (unsigned long long)r->tried,
	       (unsigned long long)r->best_start, r->best_len,
	       r->stopped_early ? ", stopped itself" : "");
	return r->stopped_early;
}

int main(void)
{
	int bad = 0;
	ml_limits l = ML_LIMITS_INIT;
	l.delivery = ML_DELIVER_FLAG;

	/* 1. A deadline: the token is set by a timer thread after 200 ms.
	 * The memo is capped, so only the deadline stops the search. */
	ml_token *tok = ml_token_new();
	if (!tok)
		return 1;
	l.token = tok;
	struct search s1 = {.limit = UINT64_MAX / 4, .memo_max = 1u << 20};
	struct timer t = {tok, 200};
	pthread_t th;
	if (pthread_create(&th, NULL, timer, &t) != 0)
		return 1;
	ml_outcome out;
	ml_status s = ml_run(&l, search, &s1, &out);
	pthread_join(th, NULL);
	if (!report("deadline (token, 200 ms):", s, &out) || s != ML_CANCELLED)
		bad = 1;
	ml_token_free(tok);

	/* 2. An allocation limit: the memo grows until 64 MiB were
	 * allocated, then the search sees the flag and stops. */
	l.token = NULL;
	l.alloc_bytes = 64u << 20;
	struct search s2 = {.limit = UINT64_MAX / 4, .memo_max = 0};
	s = ml_run(&l, search, &s2, &out);
	if (!report("allocation limit (64 MiB):", s, &out) ||
	    s != ML_ALLOC_LIMIT)
		bad = 1;

	/* 3. Within its limits the search runs to its end: ML_OK. */
	struct search s3 = {.limit = 100000, .memo_max = 0};
	s = ml_run(&l, search, &s3, &out);
	if (report("small search (below 1e5):", s, &out) || s != ML_OK ||
	    s3.best_start != 77031)
		bad = 1;
	return bad;
}
