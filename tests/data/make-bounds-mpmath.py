#!/usr/bin/env python3
"""Regenerate tests/data/bounds-mpmath.tsv: P(Poisson(n/S) >= k) in 40-digit
arithmetic (mpmath), at points the shared reference does not cover: k up to
10^7, both sides of the method switches in lib/sampler/bounds.c, and values near
1e-300.  Usage: python3 make-bounds-mpmath.py > bounds-mpmath.tsv"""
import mpmath as mp

mp.mp.dps = 40


def p_ge(k, x):
    """P(Poisson(x) >= k), summed term by term from the pmf at k."""
    k = mp.mpf(k)
    x = mp.mpf(x)
    if x == 0:
        return mp.mpf(0)
    d = mp.exp(k * mp.log(x) - x - mp.loggamma(k + 1))  # pmf(k)
    eps = mp.mpf(10) ** (-mp.mp.dps)
    if x < k:
        s, t, n = mp.mpf(1), mp.mpf(1), 1
        while True:
            t *= x / (k + n)
            s += t
            n += 1
            if t < eps * s:
                break
        return d * s
    s, t, m = mp.mpf(0), mp.mpf(1), 0
    while m < k:
        t *= (k - m) / x
        s += t
        m += 1
        if t < eps * s:
            break
    return 1 - d * s


rows = []
S = 80000
ks = [1, 2, 3, 7, 15, 16, 17, 50, 100, 1000, 10000, 99999, 100000, 100001,
      10**6, 10**7]
rs = ['1e-9', '0.001', '0.1', '0.5', '0.9', '0.99', '0.999', '1', '1.001',
      '1.01', '1.1', '2', '10']
for k in ks:
    cand = [mp.mpf(r) for r in rs]
    # Where log P is near -690 (P ~ 1e-300) for large k: eta^2 k / 2 = 690.
    if k >= 100:
        for lp in (100, 300, 600, 660, 680, 690):
            cand.append(1 - mp.sqrt(2 * lp / mp.mpf(k)))
    for r in cand:
        n = int(mp.nint(r * k * S))
        if n < 0:
            continue
        # limit not a multiple of S: k = ceil(limit / S)
        limit = k * S - 1234 if k > 1 else 1
        v = p_ge(k, mp.mpf(n) / S)
        rows.append(('alloc', n, limit, S, v))
# Other intervals.
for S2, k, n in [(1, 5, 3), (1, 1000, 900), (4096, 64, 200000),
                 (4096, 20000, 81920000), (3, 10**7, 29990000)]:
    rows.append(('alloc', n, k * S2, S2, p_ge(k, mp.mpf(n) / S2)))
print('# ml_bound_alloc(n, limit, S) = P(Poisson(n/S) >= k) in 40-digit arithmetic')
print('# by tests/data/make-bounds-mpmath.py (mpmath %s)' % mp.__version__)
for kind, n, limit, s, v in rows:
    print('%s\t%d\t%d\t%d\t%s' % (kind, n, limit, s, mp.nstr(v, 22)))
