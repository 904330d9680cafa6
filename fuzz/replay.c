/* The fuzz targets without libFuzzer: each argument is a file, or a
 * directory whose files are, passed once to LLVMFuzzerTestOneInput.  Built
 * and run by `make check` with the project's own compiler
 * (tests/unit/test-fuzz-replay.sh), so that the seed corpora replay in every
 * build, not only in CI's clang stage: a target that no longer compiles or
 * links (a stub missing after a library change), or an input that now
 * fails a target's checks, fails the test suite. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int one(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	for (size_t n; buf && (n = fread(buf + len, 1, cap - len, f)) > 0;) {
		len += n;
		if (len == cap) {
			uint8_t *more = realloc(buf, cap *= 2);
			if (!more)
				free(buf);
			buf = more;
		}
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "%s: out of memory\n", path);
		return -1;
	}
	/* An exact-size copy, as libFuzzer passes it. */
	uint8_t *data = malloc(len ? len : 1);
	if (!data) {
		free(buf);
		return -1;
	}
	memcpy(data, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(data, len);
	free(data);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (one(argv[i]) != 0)
				return 1;
			n++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			return 1;
		}
		struct dirent *de;
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			char *p;
			if (asprintf(&p, "%s/%s", argv[i], de->d_name) < 0 ||
			    one(p) != 0)
				return 1;
			free(p);
			n++;
		}
		closedir(d);
	}
	printf("%d inputs replayed\n", n);
	return 0;
}
