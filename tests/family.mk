# Malloc-family, symbol, preload, fork and thread tests.
