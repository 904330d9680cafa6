#!/bin/sh
# The stress run (tests/concurrency/stress.c), short: `make stress` runs it for 60 s.
STRESS_SECONDS=${CHECK_STRESS_SECONDS:-3}
export STRESS_SECONDS
exec "${top_builddir:-.}/tests/concurrency/stress"
