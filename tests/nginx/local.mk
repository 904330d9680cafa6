# nginx with the memlimits module (issue 18, docs/nginx.md): a PNG bomb
# through image_filter, a runaway PUT body and memlimits_global, each
# while ordinary requests go on.  Skipped with the reason where nginx, its
# image filter module, the module's build or python3 is missing.
# overhead.sh measures the module's cost (docs/nginx.md), by hand.
TESTS += tests/nginx/test-nginx.sh
EXTRA_DIST += tests/nginx/test-nginx.sh tests/nginx/nginx-client.py \
	tests/nginx/overhead.sh
