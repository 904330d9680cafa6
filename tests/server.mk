# The guarded server's demo, short version (examples/guarded-server).
TESTS += tests/test-guarded-server.sh
EXTRA_DIST += tests/test-guarded-server.sh
