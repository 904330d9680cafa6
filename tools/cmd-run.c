/* memlimits run: an unmodified program under limits.  Sets MEMLIMITS_*,
 * prepends the library to LD_PRELOAD and execs the program, which (with
 * its children) then runs as one task per thread (lib/run/runmode.c).
 *
 * Everything that would make the limits silently not apply is refused
 * before anything runs: a static program, a program of another ELF class
 * or machine, a set-user-ID program (the loader ignores LD_PRELOAD paths
 * there), a program with its own malloc or a sanitizer runtime. */
#include "config.h"

#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../lib/util/util.h"
#include "../lib/sampler/sampler.h"
#include "tool.h"

#define CMD "run"
#define LIBNAME "libmemlimits.so.0"
#define MAX_SCRIPT_DEPTH 4 /* the kernel's own limit on #! nesting */

static const char synopsis[] =
    "[--alloc-limit SIZE] [--heap-limit SIZE|P%] [--held-limit SIZE] "
    "[--interval SIZE] [--seed N] [--allocator NAME] "
    "[--on-limit fail|abort] [--report FILE] [--report-all] [--profile FILE] "
    "[--stats DIR] "
    "[--verbose] -- PROGRAM [ARG...]";

static void help(void)
{
	printf("Usage: memlimits run %s\n\n", synopsis);
	printf(
	    "Run PROGRAM (and its children) with the memlimits library "
	    "preloaded: every\nthread of every process runs as a task under "
	    "these limits (memlimits(1)).\n\n"
	    "  --alloc-limit SIZE  stop after about SIZE bytes allocated by "
	    "all threads of\n"
	    "                      a process together (estimated from the "
	    "samples)\n"
	    "  --heap-limit SIZE   refuse allocations that would take the "
	    "heap of a process\n"
	    "                      over SIZE bytes (malloc returns NULL, "
	    "ENOMEM)\n"
	    "  --heap-limit P%%     the same with P%% of the cgroup's "
	    "memory.max (cgroup v2),\n"
	    "                      or of physical memory where it sets "
	    "none, read by each\n"
	    "                      process at start\n"
	    "  --held-limit SIZE   refuse allocations that would take the "
	    "bytes all threads\n"
	    "                      of a process hold (not yet freed, "
	    "estimated from the\n"
	    "                      samples) to SIZE\n"
	    "  --interval SIZE     the mean sample interval (default " ML__INTERVAL_TEXT
	    " "
	    "bytes)\n"
	    "  --seed N            seed the sampler (reproducible runs)\n"
	    "  --allocator NAME    glibc (default), jemalloc, tcmalloc or "
	    "mimalloc: preload\n"
	    "                      that allocator behind the library\n"
	    "  --on-limit fail     allocations fail once a limit is reached "
	    "(default)\n"
	    "  --on-limit abort    write the report and exit with status 3\n"
	    "  --report FILE       write the report to FILE (default: stderr, "
	    "only when a\n"
	    "                      limit is reached); %%p in FILE is the "
	    "process id.  Only\n"
	    "                      PROGRAM and the processes that reach a "
	    "limit write one\n"
	    "  --report-all        with --report FILE: every process writes "
	    "its report\n"
	    "  --profile FILE      write a heap profile of sampled bytes in "
	    "collapsed-stack\n"
	    "                      format (flamegraph.pl, speedscope)\n"
	    "  --stats DIR         write sampling statistics to "
	    "DIR/memlimits.PID.json\n"
	    "                      (merge them with 'memlimits stats DIR')\n"
	    "  --verbose           print the settings in force before "
	    "starting PROGRAM,\n"
	    "                      inherited MEMLIMITS_* variables too\n\n"
	    "Each process gets its own budget.  Exit status: the program's; "
	    "3 when a limit\nwas reached with --on-limit abort; 2 on bad "
	    "usage (nothing is run).\n");
}

static const char *soname_of(const char *name);

struct opts {
	const char *alloc, *heap, *held, *interval, *seed, *on_limit;
	const char *report, *profile, *stats;
	const char *allocator;
	bool verbose, report_all;
};

static void size_opt(const char *name, const char *v, bool nonzero, bool limit)
{
	uint64_t x;
	int r = limit ? ml__parse_limit(v, &x) : ml__parse_size(v, &x);
	if (r == ML__PARSE_NO_LIMIT)
		ml__tool_usage_error(CMD,
		                     "%s '%s': 2^64-1 bytes would mean no "
		                     "limit (leave the option out for none)",
		                     name, v);
	if (r != 0)
		ml__tool_usage_error(CMD,
		                     "invalid size for %s: '%s' (bytes, or "
		                     "with a suffix: 64MiB, 1.5G)",
		                     name, v);
	if (nonzero && x == 0)
		ml__tool_usage_error(CMD, "%s must be at least 1 byte", name);
}

/* P%: passed on as it is, each process reads its memory size at start. */
static void percent_opt(const char *name, const char *v)
{
	uint64_t x;
	if (ml__parse_percent(v, &x) != 0)
		ml__tool_usage_error(CMD,
		                     "invalid percentage for %s: '%s' (above 0 "
		                     "and at most 100: 80%%, 12.5%%)",
		                     name, v);
}

/* One canonical form for the environment: plain bytes. */
static char *size_env(const char *v)
{
	static char bufs[3][24];
	static int next;
	uint64_t x = 0;
	ml__parse_size(v, &x);
	char *b = bufs[next++ % 3];
	snprintf(b, sizeof bufs[0], "%" PRIu64, x);
	return b;
}

/* An absolute path, so that a program changing directory still writes
 * where the user meant. */
static char *absolute(const char *p)
{
	if (p[0] == '/')
		return strdup(p);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd))
		ml__tool_usage_error(CMD,
		                     "cannot find the current directory: %s",
		                     strerror(errno));
	size_t n = strlen(cwd) + strlen(p) + 2;
	char *r = malloc(n);
	if (!r)
		ml__tool_usage_error(CMD, "out of memory");
	/* ml__tool_usage_error does not return (cppcheck misses it). */
	// cppcheck-suppress nullPointerRedundantCheck
	snprintf(r, n, "%s/%s", cwd, p);
	return r;
}

/* The report and profile files are appended to by every process of the
 * run: start them empty (unless they are per-process, with %p). */
static char *out_file(const char *opt, const char *v)
{
	if (!*v)
		ml__tool_usage_error(CMD, "%s needs a file name", opt);
	char *p = absolute(v);
	if (strstr(p, "%p")) {
		char *dir = strdup(p);
		*strrchr(dir, '/') = 0;
		struct stat st;
		if (stat(*dir ? dir : "/", &st) != 0 || !S_ISDIR(st.st_mode))
			ml__tool_usage_error(CMD, "%s: no directory for '%s'",
			                     opt, v);
		free(dir);
		return p;
	}
	/* Never block on a FIFO (ENXIO without a reader); truncate only a
	 * regular file that is not our own stdout or stderr. */
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
	              0644);
	if (fd < 0 && errno != ENXIO)
		ml__tool_usage_error(CMD, "cannot write %s '%s': %s", opt, v,
		                     strerror(errno));
	struct stat st, out, err;
	bool ok = fd >= 0 && fstat(fd, &st) == 0;
	bool is_out = ok && fstat(1, &out) == 0 && out.st_dev == st.st_dev &&
	              out.st_ino == st.st_ino;
	bool is_err = ok && fstat(2, &err) == 0 && err.st_dev == st.st_dev &&
	              err.st_ino == st.st_ino;
	if (!ok ||
	    !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || is_out || is_err))
		ml__tool_usage_error(CMD,
		                     "%s '%s' is not a regular file or a "
		                     "terminal",
		                     opt, v);
	if (S_ISREG(st.st_mode) && !is_out && !is_err && ftruncate(fd, 0) != 0)
		ml__tool_usage_error(CMD, "cannot write %s '%s': %s", opt, v,
		                     strerror(errno));
	close(fd);
	return p;
}

static void parse(int argc, char **argv, struct opts *o)
{
	enum {
		O_ALLOC = 256,
		O_HEAP,
		O_HELD,
		O_ALLOCATOR,
		O_INTERVAL,
		O_SEED,
		O_ON_LIMIT,
		O_REPORT,
		O_PROFILE,
		O_STATS,
		O_VERBOSE,
		O_REPORT_ALL,
		O_HELP
	};
	static const struct option longopts[] = {
	    {"alloc-limit", required_argument, NULL, O_ALLOC},
	    {"heap-limit", required_argument, NULL, O_HEAP},
	    {"held-limit", required_argument, NULL, O_HELD},
	    {"allocator", required_argument, NULL, O_ALLOCATOR},
	    {"interval", required_argument, NULL, O_INTERVAL},
	    {"seed", required_argument, NULL, O_SEED},
	    {"on-limit", required_argument, NULL, O_ON_LIMIT},
	    {"report", required_argument, NULL, O_REPORT},
	    {"report-all", no_argument, NULL, O_REPORT_ALL},
	    {"profile", required_argument, NULL, O_PROFILE},
	    {"stats", required_argument, NULL, O_STATS},
	    {"verbose", no_argument, NULL, O_VERBOSE},
	    {"help", no_argument, NULL, O_HELP},
	    {NULL, 0, NULL, 0},
	};
	*o = (struct opts){0};
	opterr = 0;
	optind = 1;
	for (;;) {
		int prev = optind;
		int c = getopt_long(argc, argv, "+:h", longopts, NULL);
		if (c == -1)
			break;
		switch (c) {
		case O_ALLOC:
			size_opt("--alloc-limit", optarg, false, true);
			o->alloc = optarg;
			break;
		case O_HEAP:
			if (strchr(optarg, '%'))
				percent_opt("--heap-limit", optarg);
			else
				size_opt("--heap-limit", optarg, false, true);
			o->heap = optarg;
			break;
		case O_ALLOCATOR:
			if (!soname_of(optarg))
				ml__tool_usage_error(
				    CMD,
				    "invalid --allocator '%s' (glibc, jemalloc, "
				    "tcmalloc or mimalloc)",
				    optarg);
			o->allocator = optarg;
			break;
		case O_HELD:
			size_opt("--held-limit", optarg, false, true);
			o->held = optarg;
			break;
		case O_INTERVAL:
			size_opt("--interval", optarg, true, false);
			o->interval = optarg;
			break;
		case O_SEED: {
			uint64_t x;
			if (ml__parse_u64(optarg, &x))
				ml__tool_usage_error(
				    CMD,
				    "invalid --seed '%s' (an unsigned 64-bit "
				    "integer)",
				    optarg);
			o->seed = optarg;
			break;
		}
		case O_ON_LIMIT:
			if (strcmp(optarg, "fail") && strcmp(optarg, "abort"))
				ml__tool_usage_error(
				    CMD,
				    "invalid --on-limit '%s' (fail or abort)",
				    optarg);
			o->on_limit = optarg;
			break;
		case O_REPORT:
			o->report = optarg;
			break;
		case O_REPORT_ALL:
			o->report_all = true;
			break;
		case O_PROFILE:
			o->profile = optarg;
			break;
		case O_STATS:
			o->stats = optarg;
			break;
		case O_VERBOSE:
			o->verbose = true;
			break;
		case 'h':
		case O_HELP:
			help();
			exit(ML__TOOL_OK);
		case ':':
			ml__tool_usage_error(CMD, "option '%s' needs a value",
			                     argv[optind - 1]);
		default:
			ml__tool_usage_error(
			    CMD,
			    "unknown option '%s' (see memlimits run --help)",
			    argv[prev < argc ? prev : argc - 1]);
		}
	}
	if (optind >= argc)
		ml__tool_usage_error(CMD, "missing program (memlimits run "
		                          "[OPTION]... -- PROGRAM [ARG]...)");
	if (!argv[optind][0])
		ml__tool_usage_error(CMD, "empty program name");
	if (o->report_all && !o->report)
		ml__tool_usage_error(CMD, "--report-all needs --report FILE");
}

/* ---- The program ------------------------------------------------------ */

/* execvp's search, done here so that the file can be inspected first. */
static char *find_program(const char *name)
{
	if (strchr(name, '/'))
		return strdup(name);
	const char *path = getenv("PATH");
	char def[256];
	if (!path) {
		size_t n = confstr(_CS_PATH, def, sizeof def);
		path = n && n <= sizeof def ? def : "/bin:/usr/bin";
	}
	bool denied = false;
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		int dl = (int)(end - p);
		char *cand;
		if (asprintf(&cand, "%.*s%s%s", dl, p, dl ? "/" : "", name) < 0)
			ml__tool_usage_error(CMD, "out of memory");
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(cand, X_OK) == 0)
				return cand;
			denied = true;
		}
		free(cand);
		if (!*end)
			break;
		p = end;
	}
	ml__tool_usage_error(CMD,
	                     denied ? "'%s': permission denied"
	                            : "'%s': program not found in PATH",
	                     name);
}

struct elf {
	const unsigned char *m;
	size_t len;
};

static bool in(const struct elf *e, uint64_t off, uint64_t size)
{
	return off <= e->len && size <= e->len - off;
}

/* Headers and table entries are copied out, never read in place: a
 * crafted file puts them at any offset, and a misaligned load is
 * undefined behaviour (a UBSan build aborts on it). */
static bool get(const struct elf *e, uint64_t off, void *to, size_t size)
{
	if (!in(e, off, size))
		return false;
	memcpy(to, e->m + off, size);
	return true;
}

/* Section i and the section it links to (its string table), both whole
 * in the file. */
static bool section(const struct elf *e, const Elf64_Ehdr *eh, unsigned i,
                    Elf64_Shdr *sh, Elf64_Shdr *str)
{
	return get(e, eh->e_shoff + (uint64_t)i * sizeof *sh, sh, sizeof *sh) &&
	       sh->sh_link < eh->e_shnum &&
	       get(e, eh->e_shoff + (uint64_t)sh->sh_link * sizeof *str, str,
	           sizeof *str) &&
	       in(e, sh->sh_offset, sh->sh_size) &&
	       in(e, str->sh_offset, str->sh_size);
}

/* The library is built for this command's own class and machine. */
static void host_ident(unsigned char *cls, uint16_t *machine)
{
	*cls = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
	*machine = 0;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	Elf64_Ehdr h;
	if (fd >= 0 && read(fd, &h, sizeof h) == (ssize_t)sizeof h)
		*machine = h.e_machine; /* same offset in both classes */
	if (fd >= 0)
		close(fd);
}

/* A defined function "malloc" in a symbol table section. */
static bool defines_malloc(const struct elf *e, const Elf64_Ehdr *eh,
                           unsigned type)
{
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		Elf64_Shdr sh, str;
		if (!section(e, eh, i, &sh, &str) || sh.sh_type != type)
			continue;
		const char *s = (const char *)e->m + str.sh_offset;
		for (uint64_t j = 0; j < sh.sh_size / sizeof(Elf64_Sym); j++) {
			Elf64_Sym sym;
			memcpy(&sym, e->m + sh.sh_offset + j * sizeof sym,
			       sizeof sym);
			if (sym.st_shndx != SHN_UNDEF &&
			    ELF64_ST_TYPE(sym.st_info) == STT_FUNC &&
			    sym.st_name < str.sh_size &&
			    str.sh_size - sym.st_name >= sizeof "malloc" &&
			    !memcmp(s + sym.st_name, "malloc", sizeof "malloc"))
				return true;
		}
	}
	return false;
}

/* A DT_NEEDED library whose name starts with one of `names`. */
static const char *needs_one_of(const struct elf *e, const Elf64_Ehdr *eh,
                                const char *const *names, size_t nnames)
{
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		Elf64_Shdr sh, str;
		if (!section(e, eh, i, &sh, &str) || sh.sh_type != SHT_DYNAMIC)
			continue;
		const char *s = (const char *)e->m + str.sh_offset;
		for (uint64_t j = 0; j < sh.sh_size / sizeof(Elf64_Dyn); j++) {
			Elf64_Dyn d;
			memcpy(&d, e->m + sh.sh_offset + j * sizeof d,
			       sizeof d);
			if (d.d_tag == DT_NULL)
				break;
			if (d.d_tag != DT_NEEDED ||
			    d.d_un.d_val >= str.sh_size ||
			    !memchr(s + d.d_un.d_val, 0,
			            str.sh_size - d.d_un.d_val))
				continue;
			for (size_t k = 0; k < nnames; k++)
				if (!strncmp(s + d.d_un.d_val, names[k],
				             strlen(names[k])))
					return s + d.d_un.d_val;
		}
	}
	return NULL;
}

/* A sanitizer runtime replaces malloc and insists on coming first, before
 * any preloaded library. */
static const char *const sanitizers[] = {"libasan", "libtsan", "libmsan",
                                         "libhwasan", "liblsan"};

/* Allocators a program may link (DT_NEEDED), as --allocator names them
 * (allocator_name); the one the checked program links, or NULL. */
static const char *const allocators[] = {"libjemalloc", "libtcmalloc",
                                         "libmimalloc"};
static char *linked_allocator;

static const char *allocator_name(const char *soname)
{
	return !strncmp(soname, "libjemalloc", 11)   ? "jemalloc"
	       : !strncmp(soname, "libtcmalloc", 11) ? "tcmalloc"
	                                             : "mimalloc";
}

/* The loader runs set-user-ID, set-group-ID and file-capability programs
 * in secure mode, where LD_PRELOAD paths are ignored. */
static bool secure_exec(const char *path, const struct stat *st)
{
	struct statvfs vfs;
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
		return false;
	if ((st->st_mode & S_ISUID) && st->st_uid != getuid())
		return true;
	if ((st->st_mode & S_ISGID) && st->st_gid != getgid())
		return true;
	return getxattr(path, "security.capability", NULL, 0) > 0;
}

static void check_program(const char *shown, const char *path, int depth);

static void check_script(const char *shown, const char *path,
                         const unsigned char *m, size_t len, int depth)
{
	if (depth >= MAX_SCRIPT_DEPTH)
		ml__tool_usage_error(CMD,
		                     "'%s': too many levels of #! "
		                     "interpreters",
		                     shown);
	char line[256];
	size_t n = 0;
	for (size_t i = 2; i < len && m[i] != '\n' && n + 1 < sizeof line; i++)
		line[n++] = (char)m[i];
	line[n] = 0;
	char *interp = line + strspn(line, " \t");
	interp[strcspn(interp, " \t")] = 0;
	if (!*interp)
		ml__tool_usage_error(CMD, "'%s': no interpreter after #!",
		                     path);
	check_program(shown, interp, depth + 1);
}

/* The checks on an ELF file's contents, m[0..len): return when the
 * library can be preloaded into it, else refuse.  Every offset and size in
 * the file is checked against len (tested by fuzz/fuzz-elf.c). */
static void check_elf(const char *path, const unsigned char *m, size_t len,
                      unsigned char cls, uint16_t machine)
{
	struct elf e = {m, len};
	if (len < SELFMAG || memcmp(m, ELFMAG, SELFMAG) != 0)
		ml__tool_usage_error(CMD,
		                     "'%s' is neither an ELF executable nor a "
		                     "#! script",
		                     path);
	if (len < EI_NIDENT)
		ml__tool_usage_error(CMD,
		                     "'%s' is truncated: %zu bytes, less than "
		                     "an ELF identification (%d)",
		                     path, len, EI_NIDENT);
	Elf64_Ehdr eh;
	if (m[EI_CLASS] != ELFCLASS32 && m[EI_CLASS] != ELFCLASS64)
		ml__tool_usage_error(CMD,
		                     "'%s' is not a valid ELF file: unknown "
		                     "class %u",
		                     path, m[EI_CLASS]);
	/* Cut short, the class is all that can be read: say so, not
	 * "another class" (0.2 called a truncated 64-bit file 64-bit). */
	if (m[EI_CLASS] == cls && !get(&e, 0, &eh, sizeof eh))
		ml__tool_usage_error(CMD,
		                     "'%s' is truncated: %zu bytes, less than "
		                     "its ELF header (%zu)",
		                     path, len, sizeof eh);
	if (m[EI_CLASS] != cls)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is a %s-bit program: the library (%s-bit) cannot be "
		    "preloaded into it",
		    path, m[EI_CLASS] == ELFCLASS32 ? "32" : "64",
		    cls == ELFCLASS32 ? "32" : "64");
	if (machine && eh.e_machine != machine)
		ml__tool_usage_error(CMD,
		                     "'%s' is for another machine: the library "
		                     "cannot be preloaded into it",
		                     path);
	if (eh.e_phentsize != sizeof(Elf64_Phdr))
		ml__tool_usage_error(
		    CMD,
		    "'%s' is not a valid ELF file: program "
		    "header entries of %u bytes (expected %zu)",
		    path, eh.e_phentsize, sizeof(Elf64_Phdr));
	if (!in(&e, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr)))
		ml__tool_usage_error(
		    CMD,
		    "'%s' is truncated or invalid: its program "
		    "headers (%u at offset %" PRIu64 ") end "
		    "past its %zu bytes",
		    path, eh.e_phnum, (uint64_t)eh.e_phoff, len);
	bool interp = false, dynamic = false;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		get(&e, eh.e_phoff + (uint64_t)i * sizeof ph, &ph, sizeof ph);
		interp |= ph.p_type == PT_INTERP;
		dynamic |= ph.p_type == PT_DYNAMIC;
	}
	/* No PT_INTERP: nothing runs the loader, so nothing preloads (a
	 * static-pie binary has PT_DYNAMIC but relocates itself). */
	if (!interp || !dynamic)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is statically linked: the library cannot be "
		    "preloaded into it (limits would not apply)",
		    path);
	if (eh.e_shentsize == sizeof(Elf64_Shdr) &&
	    in(&e, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr))) {
		const char *san =
		    needs_one_of(&e, &eh, sanitizers,
		                 sizeof sanitizers / sizeof sanitizers[0]);
		if (san)
			ml__tool_usage_error(
			    CMD,
			    "'%s' is linked with %s, which replaces malloc: "
			    "the library would be bypassed",
			    path, san);
		const char *a =
		    needs_one_of(&e, &eh, allocators,
		                 sizeof allocators / sizeof allocators[0]);
		free(linked_allocator);
		linked_allocator = a ? strdup(a) : NULL;
		if (defines_malloc(&e, &eh, SHT_DYNSYM) ||
		    defines_malloc(&e, &eh, SHT_SYMTAB))
			ml__tool_usage_error(
			    CMD,
			    "'%s' has its own malloc: its allocations would "
			    "bypass the library",
			    path);
	}
}

static void check_program(const char *shown, const char *path, int depth)
{
	/* O_NONBLOCK: opening a FIFO (even one with the execute bit) must
	 * not wait for a writer; its type is refused just below. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		ml__tool_usage_error(CMD, "cannot run '%s': %s", path,
		                     strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		ml__tool_usage_error(CMD, "cannot run '%s': not a regular file",
		                     path);
	if (access(path, X_OK) != 0)
		ml__tool_usage_error(CMD, "cannot run '%s': %s", path,
		                     strerror(errno));
	if (secure_exec(path, &st))
		ml__tool_usage_error(
		    CMD,
		    "'%s' runs set-user-ID, set-group-ID or with file "
		    "capabilities: the loader would ignore the library",
		    path);
	/* Mapped, not read: only the pages of the headers and symbol
	 * tables are touched, whatever the size of the program. */
	size_t got = (size_t)st.st_size;
	unsigned char *m =
	    got ? mmap(NULL, got, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
	close(fd);
	if (m == MAP_FAILED)
		ml__tool_usage_error(CMD, "cannot read '%s': %s", path,
		                     got ? strerror(errno) : "empty file");
	if (got >= 2 && m[0] == '#' && m[1] == '!') {
		check_script(shown, path, m, got, depth);
		munmap(m, got);
		return;
	}
	unsigned char cls;
	uint16_t machine;
	host_ident(&cls, &machine);
	check_elf(path, m, got, cls, machine);
	munmap(m, got);
}

/* ---- The library ------------------------------------------------------ */

static bool readable(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

static bool same_dir(const char *a, const char *b)
{
	struct stat x, y;
	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev &&
	       x.st_ino == y.st_ino;
}

/* Installed: $bindir/memlimits uses $libdir/libmemlimits.so.0.  From the
 * build tree (tools/memlimits): lib/.libs/ next to it.  Moved as a whole
 * (a relocated prefix): ../lib/. */
/* --allocator: the shared object memlimits forwards to, by name ("" for
 * glibc's, which is always there); NULL for an unknown name. */
static const char *soname_of(const char *name)
{
	static const char *const map[][2] = {
	    {"glibc", ""},
	    {"jemalloc", "libjemalloc.so.2"},
	    {"tcmalloc", "libtcmalloc_minimal.so.4"},
	    {"mimalloc", "libmimalloc.so.2"},
	};
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (!strcmp(name, map[i][0]))
			return map[i][1];
	return NULL;
}

/* The allocator's path in the system library directories (those of the
 * C library in use, their /usr twins, LD_LIBRARY_PATH's), or a one-line
 * refusal naming the Debian package; NULL for glibc. */
static char *find_allocator(const char *name)
{
	const char *so = soname_of(name);
	if (!*so)
		return NULL;
	char libc_dir[PATH_MAX] = "/lib";
	Dl_info info;
	if (dladdr((void *)gnu_get_libc_version, &info) && info.dli_fname &&
	    strlen(info.dli_fname) < sizeof libc_dir) {
		strcpy(libc_dir, info.dli_fname);
		*strrchr(libc_dir, '/') = 0;
	}
	char *dirs[16];
	int nd = 0;
	dirs[nd++] = strdup(libc_dir);
	if (asprintf(&dirs[nd++], "/usr%s", libc_dir) < 0)
		nd--;
	const char *llp = getenv("LD_LIBRARY_PATH");
	char *copy = llp ? strdup(llp) : NULL, *save = NULL;
	for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && nd < 13;
	     d = strtok_r(NULL, ":", &save))
		dirs[nd++] = strdup(d);
	dirs[nd++] = strdup("/usr/local/lib");
	dirs[nd++] = strdup("/usr/lib");
	dirs[nd++] = strdup("/lib");
	for (int i = 0; i < nd; i++) {
		char *p;
		if (dirs[i] && asprintf(&p, "%s/%s", dirs[i], so) >= 0) {
			if (readable(p) && !strpbrk(p, " \t:"))
				return p;
			free(p);
		}
	}
	ml__tool_usage_error(CMD,
	                     "--allocator %s: %s not found in the system "
	                     "library path (Debian: apt install %s)",
	                     name, so,
	                     !strcmp(name, "jemalloc") ? "libjemalloc2"
	                     : !strcmp(name, "tcmalloc")
	                         ? "libtcmalloc-minimal4"
	                         : "libmimalloc2.0");
}

static char *find_library(void)
{
	char self[PATH_MAX];
	ml__self_exe(self, sizeof self);
	if (self[0] != '/')
		ml__tool_usage_error(CMD, "cannot find this command's path");
	*strrchr(self, '/') = 0;
	char *c[6];
	int nc = 0;
#if defined(ML_LIBDIR) && defined(ML_BINDIR)
	if (same_dir(self, ML_BINDIR))
		c[nc++] = strdup(ML_LIBDIR "/" LIBNAME);
#endif
	if (asprintf(&c[nc++], "%s/../lib/.libs/" LIBNAME, self) < 0 ||
	    asprintf(&c[nc++], "%s/../../lib/.libs/" LIBNAME, self) < 0)
		ml__tool_usage_error(CMD, "out of memory");
#ifdef ML_LIBDIR
	c[nc++] = strdup(ML_LIBDIR "/" LIBNAME);
#endif
	if (asprintf(&c[nc++], "%s/../lib/" LIBNAME, self) < 0)
		ml__tool_usage_error(CMD, "out of memory");
	for (int i = 0; i < nc; i++) {
		if (!c[i] || !readable(c[i]))
			continue;
		/* The directory made canonical, the name kept: the soname,
		 * not the file it links to, stays right across upgrades. */
		*strrchr(c[i], '/') = 0;
		char *dir = realpath(c[i], NULL), *r;
		if (!dir || asprintf(&r, "%s/" LIBNAME, dir) < 0)
			continue;
		free(dir);
		/* LD_PRELOAD splits on blanks and colons. */
		if (strpbrk(r, " \t:"))
			ml__tool_usage_error(CMD,
			                     "the library's path '%s' holds a "
			                     "blank or a colon: it cannot be "
			                     "preloaded",
			                     r);
		return r;
	}
	ml__tool_usage_error(CMD,
	                     "cannot find " LIBNAME " (looked next to "
	                     "%s and in the library directory)",
	                     self);
}

/* ---- Run -------------------------------------------------------------- */

/* `memlimits run -- env LD_PRELOAD=x prog` (or env -i, env -u LD_PRELOAD):
 * env runs under the library, but starts prog without it, so prog runs
 * without limits.  Nothing can see that happen at run time without
 * interposing exec (the library is not in prog at all), so the command
 * line is read for this common case and a warning printed; the general
 * rule is in memlimits(1). */
static void warn_env_drops_library(const char *path, char **argv)
{
	const char *base = strrchr(path, '/');
	if (strcmp(base ? base + 1 : path, "env"))
		return;
	const char *why = NULL;
	for (int i = 1; argv[i] && !why; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			continue;
		if (!strcmp(a, "-") || !strcmp(a, "-i") ||
		    !strcmp(a, "--ignore-environment")) {
			why = "empties the environment";
		} else if (!strcmp(a, "--unset=LD_PRELOAD") ||
		           !strcmp(a, "-uLD_PRELOAD") ||
		           ((!strcmp(a, "-u") || !strcmp(a, "--unset")) &&
		            argv[i + 1] && !strcmp(argv[++i], "LD_PRELOAD"))) {
			why = "unsets LD_PRELOAD";
		} else if (!strncmp(a, "LD_PRELOAD=", 11)) {
			if (!strstr(a, LIBNAME))
				why = "replaces LD_PRELOAD";
		} else if (a[0] == '-' && a[1] != '-' && strchr(a, 'i') &&
		           strspn(a + 1, "i0v") == strlen(a + 1)) {
			why = "empties the environment"; /* -iv */
		} else if (a[0] != '-' && !strchr(a, '=')) {
			break; /* the command env starts */
		}
	}
	if (why)
		fprintf(stderr,
		        "memlimits run: warning: env %s: the program it starts "
		        "runs without the library (no limits)\n",
		        why);
}

static void set(const char *name, const char *v)
{
	if (v ? setenv(name, v, 1) : unsetenv(name))
		ml__tool_usage_error(CMD, "cannot set %s", name);
}

/* One line of --verbose: "memlimits run: NAME = VALUE (SOURCE)". */
static void say(const char *name, const char *value, const char *source)
{
	fprintf(stderr, "memlimits run: %s = %s (%s)\n", name, value, source);
}

/* A percentage, with what it is a percentage of here; each process
 * reads that again at start (lib/run/settings.c). */
static void say_percent(const char *name, const char *pct, const char *source)
{
	uint64_t p = 0;
	ml__parse_percent(pct, &p);
	const char *of;
	uint64_t total = ml__memory_total(ML__CGROUP_ROOT, &of);
	if (!of) {
		fprintf(stderr,
		        "memlimits run: %s = %s of a memory size that cannot "
		        "be read: ignored (%s)\n",
		        name, pct, source);
		return;
	}
	fprintf(stderr,
	        "memlimits run: %s = %" PRIu64 " bytes = %s of %s, read "
	        "again by each process at start (%s)\n",
	        name, ml__percent_of(total, p), pct, of, source);
}

/* --verbose: the settings the program starts with, each with where it
 * comes from.  The run's own variables are set above; MEMLIMITS_DELIVERY
 * and any other MEMLIMITS_* variable pass through from our environment
 * and act on the program too: a linked program's ml_run tasks take the
 * default delivery from MEMLIMITS_DELIVERY (memlimits(3)). */
static void print_settings(const struct opts *o, const char *lib,
                           const char *path)
{
	say("program", path, "PROGRAM");
	say("library", lib, "LD_PRELOAD");
	say("allocator",
	    o->allocator ? o->allocator
	                 : "glibc's, or the one the program links (jemalloc, "
	                   "tcmalloc, mimalloc)",
	    o->allocator ? "--allocator" : "default");
	say("alloc limit", o->alloc ? o->alloc : "none",
	    o->alloc ? "--alloc-limit" : "default");
	if (o->heap && strchr(o->heap, '%'))
		say_percent("heap limit", o->heap, "--heap-limit");
	else
		say("heap limit", o->heap ? o->heap : "none",
		    o->heap ? "--heap-limit" : "default");
	say("held limit", o->held ? o->held : "none",
	    o->held ? "--held-limit" : "default");
	say("on limit", o->on_limit ? o->on_limit : "fail",
	    o->on_limit ? "--on-limit" : "default");
	say("sample interval", o->interval ? o->interval : ML__INTERVAL_TEXT,
	    o->interval ? "--interval" : "default");
	say("seed", o->seed ? o->seed : "the library's fixed seed",
	    o->seed ? "--seed" : "default");
	say("report", o->report ? o->report : "stderr, when a limit is reached",
	    o->report ? "--report" : "default");
	if (o->report)
		say("report written by",
		    o->report_all
		        ? "every process"
		        : "PROGRAM and each process that reaches a limit",
		    o->report_all ? "--report-all" : "default");
	say("profile", o->profile ? o->profile : "none",
	    o->profile ? "--profile" : "default");
	say("statistics", o->stats ? o->stats : "none",
	    o->stats ? "--stats" : "default");
	const char *d = getenv("MEMLIMITS_DELIVERY");
	if (!d)
		say("default delivery", "jump", "default");
	else if (!strcmp(d, "jump") || !strcmp(d, "fail") || !strcmp(d, "flag"))
		say("default delivery", d,
		    "inherited MEMLIMITS_DELIVERY: the program's own ml_run "
		    "tasks that ask for the default use it");
	else
		say("default delivery", "jump",
		    "inherited MEMLIMITS_DELIVERY is not jump, fail or flag: "
		    "the library ignores it");
	extern char **environ;
	static const char *const own[] = {
	    "MEMLIMITS_ALLOC_LIMIT=", "MEMLIMITS_HEAP_LIMIT=",
	    "MEMLIMITS_HELD_LIMIT=",  "MEMLIMITS_SAMPLE_INTERVAL=",
	    "MEMLIMITS_SEED=",        "MEMLIMITS_ON_LIMIT=",
	    "MEMLIMITS_REPORT=",      "MEMLIMITS_PROFILE=",
	    "MEMLIMITS_STATS_DIR=",   "MEMLIMITS_DELIVERY=",
	    "MEMLIMITS_REPORT_PID="};
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "MEMLIMITS_", 10))
			continue;
		bool known = false;
		for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
			known |= !strncmp(*e, own[i], strlen(own[i]));
		if (!known)
			fprintf(stderr, "memlimits run: %s (inherited)\n", *e);
	}
}

static int run_main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	char **prog = argv + optind;
	char *path = find_program(prog[0]);
	check_program(prog[0], path, 0);
	warn_env_drops_library(path, prog);
	char *lib = find_library();

	char *stats = NULL;
	if (o.stats) {
		struct stat st;
		if (!*o.stats || stat(o.stats, &st) != 0 ||
		    !S_ISDIR(st.st_mode) || access(o.stats, W_OK | X_OK) != 0)
			ml__tool_usage_error(CMD,
			                     "--stats '%s' is not a writable "
			                     "directory",
			                     o.stats);
		stats = absolute(o.stats);
	}
	char *report = o.report ? out_file("--report", o.report) : NULL;
	char *profile = o.profile ? out_file("--profile", o.profile) : NULL;

	/* The run's settings are exactly these: nothing inherited from an
	 * enclosing run. */
	set("MEMLIMITS_ALLOC_LIMIT", o.alloc ? size_env(o.alloc) : NULL);
	set("MEMLIMITS_HEAP_LIMIT",
	    !o.heap || strchr(o.heap, '%') ? o.heap : size_env(o.heap));
	set("MEMLIMITS_HELD_LIMIT", o.held ? size_env(o.held) : NULL);
	set("MEMLIMITS_SAMPLE_INTERVAL",
	    o.interval ? size_env(o.interval) : NULL);
	set("MEMLIMITS_SEED", o.seed);
	set("MEMLIMITS_ON_LIMIT", o.on_limit);
	set("MEMLIMITS_REPORT", report);
	/* The report file gets PROGRAM's report (exec keeps this pid) and
	 * those of processes that reach a limit: a test suite's hundreds of
	 * "limit reached: none" reports buried the one that mattered. */
	char pid[24];
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	set("MEMLIMITS_REPORT_PID", report && !o.report_all ? pid : NULL);
	set("MEMLIMITS_PROFILE", profile);
	set("MEMLIMITS_STATS_DIR", stats);

	/* The allocator right after the library: the one it forwards to. */
	char *alloc = o.allocator ? find_allocator(o.allocator) : NULL;
	/* Another allocator than the one the program links: it runs as
	 * asked (a user may mean to compare them), but not silently. */
	if (o.allocator && linked_allocator &&
	    strcmp(o.allocator, allocator_name(linked_allocator)))
		fprintf(stderr,
		        "memlimits run: warning: '%s' is linked with %s; "
		        "--allocator %s %s\n",
		        path, linked_allocator, o.allocator,
		        alloc ? "replaces it (its allocations go to the one "
		                "preloaded)"
		              : "preloads nothing: it keeps its own");
	const char *old = getenv("LD_PRELOAD");
	char *preload;
	if (asprintf(&preload, "%s%s%s%s%s", lib, alloc ? ":" : "",
	             alloc ? alloc : "", old && *old ? ":" : "",
	             old ? old : "") < 0)
		ml__tool_usage_error(CMD, "out of memory");
	set("LD_PRELOAD", preload);
	if (o.verbose)
		print_settings(&o, lib, path);

	fflush(NULL);
	execv(path, prog);
	ml__tool_usage_error(CMD, "cannot run '%s': %s", path, strerror(errno));
}

const struct ml__tool_cmd ml__tool_cmd_run = {
    .name = "run",
    .synopsis = synopsis,
    .summary = "run an unmodified program under memory limits, with a "
               "report",
    .main = run_main,
};
