/* memlimits flamegraph PROFILE [-o OUT.svg]: a collapsed-stack profile as
 * a standalone SVG flame graph (tools/svg.c draws it).
 *
 * The input is any collapsed-stack file: `memlimits run --profile`'s, or
 * another tool's (flamegraph.pl's stackcollapse-*, perf's or heaptrack's
 * exports): one stack a line, "outer;...;inner COUNT", COUNT an unsigned
 * integer after the last blank.  Blank lines are skipped; anything else
 * that is not such a line stops the command with its line number (exit
 * status 2, nothing written).  Widths are by COUNT (bytes, in our
 * profiles); the root is at the bottom, callees above their callers,
 * siblings in name order.  A frame narrower than 0.1 % of the total is
 * merged with its narrow siblings into one grey "[N frames under 0.1 %]"
 * block (its callees not drawn), so that a profile of 10 000 stacks stays
 * a few hundred KB.  Colours come from a hash of the name (the warm
 * palette of flamegraph.pl): one function, one colour, in every picture.
 *
 * Lines that start with "# " are comments.  `memlimits run --profile
 * FILE`'s held profiles (FILE.peak, FILE.stop: memlimits(1), "PROFILE")
 * begin each process's block with "# memlimits held at the peak" (or
 * "stop") and "# key value" lines (pid, program, held_bytes, heap_bytes,
 * the limit that stopped it): the picture is titled from them, naming the
 * program and what the picture is.  --held PROFILE draws PROFILE.stop
 * where it exists, else PROFILE.peak, else PROFILE when it is a held
 * profile itself (memlimits.profile_at_stop's file).  The profile of what was
 * allocated (FILE itself) has no comments, so that other tools read it as it
 * is: a profile beside a held one (FILE.peak or FILE.stop that starts with our
 * comment) is memlimits run's, and its picture is titled "PROGRAM: allocated
 * over the whole run", the program its widest root frame. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svg.h"
#include "tool.h"

#define CMD "flamegraph"

static const char synopsis[] = "[-o OUT.svg] [--title TEXT] [--held] PROFILE";

/* The picture's geometry, in pixels. */
#define WIDTH 1200.0
#define SIDE 10.0                  /* margin left and right */
#define FRAME_H 16.0               /* one frame's height, a pixel of it a gap */
#define TOP 58.0                   /* title and subtitle */
#define BOTTOM 24.0                /* the note under the root */
#define FONT 11.0                  /* frame labels */
#define CHAR_W (FONT * ML__SVG_EM) /* their mean advance (svg.h) */
#define MIN_SHARE 1000             /* frames under total/MIN_SHARE are merged */

/* Frames, and names, at most: the tables' uint32_t sizes double up to
 * twice as many. */
#define ITEMS_MAX (1u << 30)

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		ml__tool_usage_error(CMD, "out of memory");
	return p;
}

/* ---- Indexes: items by hash ------------------------------------------ */

/* Open addressing, at most half full: an item's index + 1, 0 empty.  The
 * items live in an array of their own; hash_of gives an item's hash. */
struct index {
	uint32_t *slot;
	uint32_t size; /* a power of two, or 0 */
	uint32_t (*hash_of)(uint32_t id);
};

static void index_put(struct index *x, uint32_t id)
{
	uint32_t m = x->size - 1, i = x->hash_of(id) & m;
	while (x->slot[i])
		i = (i + 1) & m;
	x->slot[i] = id + 1;
}

/* Room for item n (items first..n-1 indexed): doubled and refilled. */
static void index_room(struct index *x, uint32_t first, uint32_t n,
                       uint32_t min_size)
{
	if (2 * (n + 1) <= x->size)
		return;
	free(x->slot);
	x->size = x->size ? 2 * x->size : min_size;
	x->slot = calloc(x->size, sizeof *x->slot);
	if (!x->slot)
		ml__tool_usage_error(CMD, "out of memory");
	for (uint32_t i = first; i < n; i++)
		index_put(x, i);
}

/* ---- Names, interned -------------------------------------------------- */

struct name {
	char *s;
	size_t len;
	uint32_t hash;
};
static struct name *names;
static uint32_t nnames, names_cap;

static uint32_t name_hash(uint32_t id)
{
	return names[id].hash;
}
static struct index name_index = {.hash_of = name_hash};

static uint32_t intern(const char *s, size_t len)
{
	uint32_t h = ml__svg_hash(s, len);
	if (name_index.size) {
		uint32_t m = name_index.size - 1;
		for (uint32_t i = h & m; name_index.slot[i]; i = (i + 1) & m) {
			struct name *n = &names[name_index.slot[i] - 1];
			if (n->hash == h && n->len == len &&
			    !memcmp(n->s, s, len))
				return name_index.slot[i] - 1;
		}
	}
	if (nnames == ITEMS_MAX)
		ml__tool_usage_error(CMD, "more than %u names", ITEMS_MAX);
	if (nnames == names_cap) {
		names_cap = names_cap ? 2 * names_cap : 1024;
		names = xrealloc(names, names_cap * sizeof *names);
	}
	index_room(&name_index, 0, nnames, 4096);
	struct name *n = &names[nnames];
	n->s = xrealloc(NULL, len + 1);
	memcpy(n->s, s, len);
	n->s[len] = 0;
	n->len = len;
	n->hash = h;
	index_put(&name_index, nnames);
	return nnames++;
}

/* ---- The tree of frames ----------------------------------------------- */

struct node {
	uint64_t value; /* the counts of the stacks through this frame */
	uint32_t name, parent;
	uint32_t depth;        /* the root's is 0 */
	uint32_t nkids, first; /* the children: kids[first, first + nkids) */
};
#define NONE UINT32_MAX
static struct node *nodes;
static uint32_t nnodes, nodes_cap;
/* Every node but the root, by parent and then name (sort_kids): each
 * node's children in the order they are drawn. */
static uint32_t *kids;

static uint32_t kid_hash(uint32_t parent, uint32_t name)
{
	uint64_t k = (uint64_t)parent << 32 | name;
	k *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(k >> 32);
}

static uint32_t node_hash(uint32_t id)
{
	return kid_hash(nodes[id].parent, nodes[id].name);
}
/* (parent, name) -> child; every node but the root (0). */
static struct index kid_index = {.hash_of = node_hash};

static uint32_t new_node(uint32_t parent, uint32_t name)
{
	if (nnodes == ITEMS_MAX)
		ml__tool_usage_error(CMD, "more than %u frames", ITEMS_MAX);
	if (nnodes == nodes_cap) {
		nodes_cap = nodes_cap ? 2 * nodes_cap : 4096;
		nodes = xrealloc(nodes, nodes_cap * sizeof *nodes);
	}
	index_room(&kid_index, 1, nnodes, 8192);
	uint32_t id = nnodes++;
	nodes[id] = (struct node){.name = name, .parent = parent};
	if (parent != NONE) {
		nodes[id].depth = nodes[parent].depth + 1;
		nodes[parent].nkids++;
		index_put(&kid_index, id);
	}
	return id;
}

static uint32_t child(uint32_t parent, uint32_t name)
{
	uint32_t m = kid_index.size - 1;
	for (uint32_t i = kid_hash(parent, name) & m; kid_index.slot[i];
	     i = (i + 1) & m) {
		struct node *n = &nodes[kid_index.slot[i] - 1];
		if (n->parent == parent && n->name == name)
			return kid_index.slot[i] - 1;
	}
	return new_node(parent, name);
}

/* ---- Reading ---------------------------------------------------------- */

static uint64_t nstacks;

/* What the held profiles' comments say: the blocks (one a process), the
 * kinds seen (1: at the peak, 2: at the stop), and the largest block's
 * figures, for the title. */
struct block {
	uint64_t pid, held, heap, limit;
	char limit_name[24]; /* "heap_limit", ... or "" */
	char program[256];
};
static struct {
	uint64_t n;
	unsigned kinds;
	struct block cur, big;
} held_info;

static void held_block_end(void)
{
	if (held_info.n && held_info.cur.held >= held_info.big.held)
		held_info.big = held_info.cur;
}

/* "# key value": only the held profiles' keys mean anything. */
static void comment(const char *s)
{
	struct block *b = &held_info.cur;
	const char *v;
	if (!strcmp(s, "# memlimits held at the peak") ||
	    !strcmp(s, "# memlimits held at the stop")) {
		held_block_end();
		held_info.n++;
		held_info.kinds |= s[24] == 'p' ? 1 : 2;
		memset(b, 0, sizeof *b);
		return;
	}
	if (!held_info.n)
		return;
	if (!strncmp(s, "# program ", 10)) {
		snprintf(b->program, sizeof b->program, "%s", s + 10);
		return;
	}
	static const char *const keys[] = {
	    "pid",        "held_bytes", "heap_bytes",     "alloc_limit",
	    "heap_limit", "held_limit", "tree_heap_limit"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		size_t k = strlen(keys[i]);
		if (strncmp(s + 2, keys[i], k) || s[2 + k] != ' ')
			continue;
		v = s + 3 + k;
		uint64_t x = 0;
		/* Not a number: the comment is not ours, and says nothing. */
		if (!*v || strspn(v, "0123456789") != strlen(v) ||
		    strlen(v) > 19)
			return;
		x = strtoull(v, NULL, 10);
		if (i == 0)
			b->pid = x;
		else if (i == 1)
			b->held = x;
		else if (i == 2)
			b->heap = x;
		else {
			b->limit = x;
			snprintf(b->limit_name, sizeof b->limit_name, "%s",
			         keys[i]);
		}
		return;
	}
}

static _Noreturn void bad_line(const char *file, uint64_t line, const char *why)
{
	ml__tool_usage_error(CMD,
	                     "%s: line %" PRIu64 ": %s (expected "
	                     "'frame;frame;... COUNT')",
	                     file, line, why);
}

/* The line read, kept here between lines (and reachable when a bad line
 * ends the command: the fuzz target frees it). */
static char *text;
static size_t text_cap;

static void read_profile(const char *file, FILE *f)
{
	uint64_t line = 0;
	new_node(NONE, intern("all", 3));
	while (ml__svg_read_line(CMD, file, f, &text, &text_cap, &line) >= 0) {
		char *s = text;
		size_t b = strspn(s, " \t");
		if (s[b] == 0)
			continue;
		if (s[0] == '#' && s[1] == ' ') {
			comment(s);
			continue;
		}
		char *sp = strrchr(s, ' '), *tab = strrchr(s, '\t');
		if (!sp || (tab && tab > sp))
			sp = tab;
		if (!sp)
			bad_line(file, line, "no count");
		/* bad_line does not return (cppcheck misses it). */
		// cppcheck-suppress nullPointerArithmeticRedundantCheck
		const char *c = sp + 1;
		if (!*c || strspn(c, "0123456789") != strlen(c))
			bad_line(file, line,
			         "the count is not an unsigned integer");
		uint64_t count = 0;
		for (; *c; c++)
			if (__builtin_mul_overflow(count, 10, &count) ||
			    __builtin_add_overflow(count, (uint64_t)(*c - '0'),
			                           &count))
				bad_line(file, line, "a count beyond 2^64-1");
		char *end = sp;
		while (end > s + b && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (end <= s + b) /* " 5": the blank before the count */
			bad_line(file, line, "no frames before the count");
		if (!count)
			continue;
		if (__builtin_add_overflow(nodes[0].value, count,
		                           &nodes[0].value))
			bad_line(file, line, "the counts add up beyond 2^64-1");
		nstacks++;
		uint32_t at = 0;
		for (char *p = s + b; p < end;) {
			char *semi = memchr(p, ';', (size_t)(end - p));
			char *e = semi ? semi : end;
			uint32_t nm = e > p ? intern(p, (size_t)(e - p))
			                    : intern("[empty]", 7);
			at = child(at, nm);
			nodes[at].value += count; /* <= the root's: no wrap */
			p = semi ? semi + 1 : end;
		}
	}
	free(text);
	text = NULL;
	text_cap = 0;
	held_block_end();
	if (!nodes[0].value)
		ml__tool_usage_error(CMD,
		                     "%s: no stacks (an empty profile, or "
		                     "every count 0)",
		                     file);
}

/* ---- Drawing ---------------------------------------------------------- */

static uint64_t total, min_value;
static double scale; /* pixels per count */
static uint64_t drawn, merged_blocks;

/* By parent, then name (a parent's children have different names). */
static int by_parent_name(const void *a, const void *b)
{
	const struct node *x = &nodes[*(const uint32_t *)a];
	const struct node *y = &nodes[*(const uint32_t *)b];
	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return strcmp(names[x->name].s, names[y->name].s);
}

static void sort_kids(void)
{
	kids = xrealloc(NULL, (size_t)nnodes * sizeof *kids);
	for (uint32_t id = 1; id < nnodes; id++)
		kids[id - 1] = id;
	qsort(kids, nnodes - 1, sizeof *kids, by_parent_name);
	for (uint32_t i = nnodes - 1; i-- > 0;)
		nodes[nodes[kids[i]].parent].first = i;
}

/* The deepest level drawn (the root is 0), without recursion (a stack of
 * 50 000 frames overflowed the C stack): a frame is drawn when it is as
 * wide as min_value (its callers are wider), and a merged block of its
 * narrow callees is one level above it. */
static uint32_t picture_depth(void)
{
	uint32_t d = 0;
	for (uint32_t id = 0; id < nnodes; id++) {
		const struct node *nd = &nodes[id];
		if (nd->value < min_value)
			continue;
		d = nd->depth > d ? nd->depth : d;
		uint64_t small = 0;
		for (uint32_t i = nd->first; i < nd->first + nd->nkids; i++)
			if (nodes[kids[i]].value < min_value)
				small += nodes[kids[i]].value;
		if (small >= min_value && nd->depth + 1 > d)
			d = nd->depth + 1;
	}
	return d;
}

static double base_y; /* the root's top */

static void share(char *buf, size_t cap, uint64_t v)
{
	double p = 100.0 * (double)v / (double)total;
	snprintf(buf, cap, p >= 10 ? "%.1f %%" : "%.2f %%", p);
}

/* The label that fits w pixels: the name, or its start and "..", or
 * nothing. */
static void label(FILE *f, double x, double y, double w, const struct name *n)
{
	size_t fit = (size_t)((w - 6) / CHAR_W);
	if (fit < 3)
		return;
	/* Characters, not bytes: UTF-8 continuation bytes are free. */
	size_t chars = 0, cut = n->len;
	bool longer = false;
	for (size_t i = 0; i < n->len; i++) {
		if (((unsigned char)n->s[i] & 0xc0) == 0x80)
			continue;
		if (chars == fit - 2 && cut == n->len)
			cut = i;
		if (++chars > fit) {
			longer = true;
			break;
		}
	}
	fputs("<text x=\"", f);
	fprintf(f, "%.1f\" y=\"%.1f\" font-size=\"%g\">", x + 3, y + FONT,
	        FONT);
	ml__svg_escape(f, n->s, longer ? cut : n->len);
	if (longer)
		fputs("..", f);
	fputs("</text>", f);
}

static void frame(FILE *f, double x, uint32_t depth, uint64_t value,
                  const struct name *n, const char *fill)
{
	double y = base_y - depth * FRAME_H, w = value * scale;
	char b[32], s[32];
	ml__svg_bytes(b, sizeof b, (double)value);
	share(s, sizeof s, value);
	ml__svg_group(f, "%s\n%s (%" PRIu64 " bytes), %s", n->s, b, value, s);
	ml__svg_rect(f, x, y, w, FRAME_H - 1, fill, NULL);
	label(f, x, y, w, n);
	ml__svg_group_end(f);
	drawn++;
}

static void colour(char *buf, size_t cap, const struct name *n)
{
	uint32_t h = n->hash;
	/* flamegraph.pl's "hot": red high, green from none to most, a
	 * little blue. */
	unsigned r = 205 + (h & 0xff) * 50 / 255;
	unsigned g = ((h >> 8) & 0xff) * 230 / 255;
	unsigned b = ((h >> 16) & 0xff) * 55 / 255;
	snprintf(buf, cap, "#%02x%02x%02x", r, g, b);
}

static void draw_node(FILE *f, uint32_t id, double x)
{
	const struct node *nd = &nodes[id];
	char fill[8];
	colour(fill, sizeof fill, &names[nd->name]);
	frame(f, x, nd->depth, nd->value, &names[nd->name],
	      id == 0 ? "#e8a050" : fill);
}

/* The frames being drawn, from the root to the last drawn: the next child
 * of each, where it goes, and its narrow children so far. */
struct level {
	uint32_t id, next;
	double cx;
	uint64_t small, nsmall;
};
static struct level *levels;

/* Every frame, depth first (callees left to right in name order, a
 * merged block after them), on a stack of its own rather than the C
 * stack, which a deep profile overflowed. */
static void draw(FILE *f)
{
	size_t top = 0, cap = 64;
	levels = xrealloc(levels, cap * sizeof *levels);
	draw_node(f, 0, SIDE);
	levels[top++] =
	    (struct level){.id = 0, .next = nodes[0].first, .cx = SIDE};
	while (top) {
		struct level *l = &levels[top - 1];
		const struct node *nd = &nodes[l->id];
		if (l->next < nd->first + nd->nkids) {
			uint32_t kid = kids[l->next++];
			uint64_t v = nodes[kid].value;
			if (v < min_value) {
				l->small += v;
				l->nsmall++;
				continue;
			}
			double x = l->cx;
			l->cx += v * scale;
			draw_node(f, kid, x);
			if (top == cap) {
				cap *= 2;
				levels = xrealloc(levels, cap * sizeof *levels);
			}
			levels[top++] = (struct level){
			    .id = kid, .next = nodes[kid].first, .cx = x};
			continue;
		}
		if (l->small >= min_value) {
			char what[64];
			snprintf(what, sizeof what,
			         "[%" PRIu64 " frame%s under 0.1 %%]",
			         l->nsmall, l->nsmall == 1 ? "" : "s");
			struct name n = {.s = what, .len = strlen(what)};
			frame(f, l->cx, nd->depth + 1, l->small, &n, "#c8c8c8");
			merged_blocks++;
		}
		top--;
	}
}

static void help(void)
{
	printf("Usage: memlimits flamegraph %s\n\n", synopsis);
	printf("Draw a collapsed-stack profile (memlimits run --profile FILE, "
	       "or another\ntool's: 'frame;frame;... COUNT' a line) as a "
	       "standalone SVG flame graph:\nwidths by COUNT (bytes), frames "
	       "under 0.1 %% of the total merged, hover a\nframe for its "
	       "name, bytes and share (memlimits(1)).\n\n"
	       "  -o, --output FILE  write the SVG to FILE (default: "
	       "PROFILE.svg; '-': stdout,\n"
	       "                     the default when PROFILE is '-', "
	       "stdin)\n"
	       "  --title TEXT       the picture's title (default: what a "
	       "held profile's\n"
	       "                     comments say; the program and "
	       "\"allocated over the\n"
	       "                     whole run\" for a profile beside a held "
	       "one; else\n"
	       "                     \"Flame graph: PROFILE\")\n"
	       "  --held             draw what was held: PROFILE.stop where "
	       "a limit stopped\n"
	       "                     the program, else PROFILE.peak "
	       "(memlimits run --profile),\n"
	       "                     else PROFILE when it is a held profile "
	       "itself\n\n"
	       "Exit status: 0; 2 on bad usage or bad input (one line on "
	       "stderr, nothing\nwritten).\n");
}

/* PROFILE is memlimits run's profile of what was allocated: a held
 * profile of the same run lies beside it (the run removes an earlier
 * run's two files when it starts). */
static bool allocated;

/* name is a held profile of ours: a regular file (a FIFO would block the
 * open) whose first line starts a held block. */
static bool held_file(const char *name)
{
	static const char head[] = "# memlimits held at the ";
	struct stat st;
	FILE *f =
	    !stat(name, &st) && S_ISREG(st.st_mode) ? fopen(name, "re") : NULL;
	char line[sizeof head];
	bool found = f && fgets(line, sizeof line, f) &&
	             !strncmp(line, head, sizeof head - 1);
	if (f)
		fclose(f);
	return found;
}

static bool beside_held(const char *in)
{
	static const char *const suffix[] = {".stop", ".peak"};
	bool found = false;
	for (size_t i = 0; i < 2 && !found && strcmp(in, "-"); i++) {
		char *name = NULL;
		if (asprintf(&name, "%s%s", in, suffix[i]) < 0)
			ml__tool_usage_error(CMD, "out of memory");
		found = held_file(name);
		free(name);
	}
	return found;
}

/* "cc1 and 3 other programs: allocated over the whole run, 1.2 GiB in
 * all": memlimits run's allocation profile, its stacks under the
 * program's name. */
static int allocated_title(char **t, const char *all)
{
	uint32_t wide = NONE, roots = 0;
	for (uint32_t id = 1; id < nnodes; id++)
		if (nodes[id].parent == 0) {
			roots++;
			if (wide == NONE || nodes[id].value > nodes[wide].value)
				wide = id;
		}
	const char *prog = wide != NONE ? names[nodes[wide].name].s : "?";
	if (roots <= 1)
		return asprintf(t,
		                "%s: allocated over the whole run, %s in all",
		                prog, all);
	return asprintf(t,
	                "%s and %" PRIu32 " other program%s: allocated over "
	                "the whole run, %s in all",
	                prog, roots - 1, roots == 2 ? "" : "s", all);
}

/* "python3.11 (pid 42): held at the stop, 199 MiB of the 200 MiB heap
 * limit" from a held profile's comments; memlimits run's allocation
 * profile by its program (allocated_title); "Flame graph: FILE" for any
 * other profile. */
static char *default_title(const char *shown)
{
	char *t = NULL;
	int n;
	if (!held_info.n && allocated) {
		char all[32];
		ml__svg_bytes(all, sizeof all, (double)total);
		n = allocated_title(&t, all);
	} else if (!held_info.n) {
		n = asprintf(&t, "Flame graph: %s", shown);
	} else {
		const struct block *b = &held_info.big;
		const char *prog = strrchr(b->program, '/');
		prog = prog ? prog + 1 : b->program;
		char who[320], all[32], lim[32];
		if (held_info.n == 1)
			snprintf(who, sizeof who, "%s (pid %" PRIu64 ")",
			         *prog ? prog : "?", b->pid);
		else
			snprintf(who, sizeof who,
			         "%s (pid %" PRIu64 ") and %" PRIu64
			         " other process%s",
			         *prog ? prog : "?", b->pid, held_info.n - 1,
			         held_info.n == 2 ? "" : "es");
		ml__svg_bytes(all, sizeof all, (double)total);
		ml__svg_bytes(lim, sizeof lim, (double)b->limit);
		const char *ln = b->limit_name;
		const char *what =
		    !strcmp(ln, "alloc_limit")       ? "allocation limit"
		    : !strcmp(ln, "held_limit")      ? "held limit"
		    : !strcmp(ln, "tree_heap_limit") ? "tree heap limit"
		                                     : "heap limit";
		if (held_info.kinds == 2 && held_info.n == 1 && *ln)
			n = asprintf(&t,
			             "%s: held at the stop, %s of the %s %s",
			             who, all, lim, what);
		else if (held_info.kinds == 2)
			n = asprintf(&t, "%s: held at the stop, %s in all", who,
			             all);
		else if (held_info.kinds == 1 && held_info.n == 1)
			n = asprintf(&t, "%s: held at the peak, %s", who, all);
		else if (held_info.kinds == 1)
			n = asprintf(&t, "%s: held at their peaks, %s in all",
			             who, all);
		else
			n = asprintf(&t, "%s: held, %s in all", who, all);
	}
	if (n < 0)
		ml__tool_usage_error(CMD, "out of memory");
	return t;
}

/* The flame graph of the stacks read, into o (shown: the input's name,
 * for the default title).  The fuzz target calls it too. */
static void flamegraph(FILE *o, const char *title, const char *shown)
{
	total = nodes[0].value;
	min_value = total / MIN_SHARE + (total % MIN_SHARE != 0);
	scale = (WIDTH - 2 * SIDE) / (double)total;
	sort_kids();
	uint32_t depth = picture_depth();
	double height = TOP + (depth + 1) * FRAME_H + BOTTOM;
	base_y = TOP + depth * FRAME_H;

	char *t = NULL;
	if (!title)
		title = t = default_title(shown);
	ml__svg_begin(o, WIDTH, height, title);
	ml__svg_text(o, WIDTH / 2, 24, "middle", 17, "#000000", "bold", "%s",
	             title);
	char tb[32];
	ml__svg_bytes(tb, sizeof tb, (double)total);
	ml__svg_text(o, WIDTH / 2, 44, "middle", 12, "#444444", NULL,
	             "%" PRIu64 " stacks, %s %s; widths by bytes, callers "
	             "below their callees; hover a frame for its figures",
	             nstacks, tb,
	             held_info.n ? "held (estimated from the samples)"
	             : allocated ? "allocated (estimated from the samples)"
	                         : "in all");
	draw(o);
	ml__svg_text(o, SIDE, height - 8, "start", 11, "#666666", NULL,
	             "Frames under 0.1 %% of the total are merged into grey "
	             "blocks (%" PRIu64 " of them); %" PRIu64 " frames drawn.",
	             merged_blocks, drawn);
	ml__svg_end(o);
	free(t);
}

static int flamegraph_main(int argc, char **argv)
{
	const char *out = NULL, *title = NULL;
	bool held = false;
	const char *in =
	    ml__svg_args(CMD, "PROFILE", argc, argv, help, &out, &title, &held);
	if (!in)
		return ML__TOOL_OK;
	char *held_in = NULL;
	if (held) {
		/* What held the memory: at the stop where a limit stopped
		 * the program, else at the peak. */
		if (!strcmp(in, "-"))
			ml__tool_usage_error(CMD, "--held needs the profile's "
			                          "file name, not '-'");
		if (asprintf(&held_in, "%s.stop", in) < 0)
			ml__tool_usage_error(CMD, "out of memory");
		if (access(held_in, F_OK) != 0)
			memcpy(held_in + strlen(in), ".peak", 5);
		/* Neither, and PROFILE is a held profile itself (the Python
		 * module's profile_at_stop file): PROFILE. */
		if (access(held_in, F_OK) == 0 || !held_file(in))
			in = held_in;
	}
	const char *shown = strcmp(in, "-") ? in : "stdin";
	allocated = !held && beside_held(in);
	FILE *f = ml__svg_open_in(CMD, in);
	read_profile(shown, f);
	if (f != stdin)
		fclose(f);
	const char *outname = ml__svg_out_name(in, out);
	FILE *o = ml__svg_open_out(CMD, outname);
	flamegraph(o, title, shown);
	ml__svg_close_out(CMD, o, outname);
	free(held_in);
	return ML__TOOL_OK;
}

const struct ml__tool_cmd ml__tool_cmd_flamegraph = {
    .name = "flamegraph",
    .synopsis = synopsis,
    .summary = "draw a collapsed-stack profile as an SVG flame graph",
    .main = flamegraph_main,
};
