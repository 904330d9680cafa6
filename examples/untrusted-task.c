/* A task that runs away is stopped by its allocation limit (JUMP delivery:
 * ml_run returns as soon as the limit is reached), and the program goes on.
 * Build: cc untrusted-task.c $(pkg-config --cflags --libs memlimits) */
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
	struct node *next;
	char payload[240];
};

/* Stands for an untrusted parser: builds a list whose length the input
 * controls, here "forever". */
static void *runaway(void *arg)
{
	struct node *head = NULL;
	for (unsigned long i = 0;; i++) {
		struct node *n = malloc(sizeof *n);
		if (!n)
			return NULL;
		memset(n->payload, (int)i, sizeof n->payload);
		n->next = head;
		head = n;
		*(struct node **)arg = head; /* let the caller free it */
	}
}

static void *well_behaved(void *arg)
{
	char *s = malloc(1000);
	snprintf(s, 1000, "parsed %s", (const char *)arg);
	return s;
}

static void free_list(struct node *n)
{
	while (n) {
		struct node *next = n->next;
		free(n);
		n = next;
	}
}

int main(void)
{
	struct node *list = NULL;
	ml_outcome out;
	ml_status s = ml_limit_allocations(64u << 20, runaway, &list, &out);
	printf("runaway task:     %-26s after ~%llu MiB (limit 64 MiB)\n",
	       ml_status_str(s), (unsigned long long)(out.allocated >> 20));
	free_list(list);

	s = ml_limit_allocations(64u << 20, well_behaved, "input.json", &out);
	printf("well-behaved task: %-25s -> \"%s\"\n", ml_status_str(s),
	       (char *)out.ret);
	free(out.ret);
	return 0;
}
