# Bounds and conformance tests.
