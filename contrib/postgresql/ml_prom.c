/* The library's one Prometheus writer (lib/util/prom.c) and the number
 * formatting it needs (lib/util/parse.c), compiled into the extension as
 * the memlimits command compiles them in (tools/local.mk): the extension
 * otherwise uses only the library's public API.  Hidden, so that the
 * extension's copies never take the place of the preloaded library's
 * internal ones. */
/* The C library's declarations first: they must stay default. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#pragma GCC visibility push(hidden)
#include "util/prom.c"
#include "util/parse.c"
#pragma GCC visibility pop
