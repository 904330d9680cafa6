"""Clients for tests/nginx/test-nginx.sh (issue 18).

  nginx-client.py png bomb|small FILE [SIZE]  write a PNG (a bomb declares
                                              SIZE x SIZE pixels of zeros)
  nginx-client.py get PORT PATH               status and length of one GET
  nginx-client.py load PORT HTMLDIR NORD NBOMB  NORD clients request static
      files and thumbnails in a loop while NBOMB PNG bomb requests are made,
      two at a time; prints one line per kind of result
  nginx-client.py put PORT PATH MIB           a PUT whose body is MIB MiB
  nginx-client.py pressure PORT BIGMIB [REQ...]  a GET and each REQ
      (below) while a slow PUT holds BIGMIB, and again after it ended
  nginx-client.py ask PORT REQ...           each REQ once
      REQ is METHOD:PATH[:gzip]; a PUT sends the head of a 512 MiB body;
      gzip asks for gzip.  One line each: "REQ STATUS LENGTH ENCODING
      SIZE TYPE", where LENGTH is the Content-Length, SIZE the body read
      and ENCODING and TYPE the Content-Encoding and Content-Type ("-"
      when absent); and "REQ body ..." with its first 60 bytes
  nginx-client.py global PORT BIGMIB SECONDMIB  a slow PUT holding BIGMIB,
      then one of SECONDMIB, with small requests throughout
  nginx-client.py shared PORT BIGMIB SMALLMIB N  a PUT of BIGMIB that
      sends its head and waits, then N PUTs of SMALLMIB sent whole at once
      (each on its own connection: with reuseport, any worker); prints the
      big one's status (0: closed, -1: no answer in 20 s) and the others'
  nginx-client.py metrics PORT PATH N DIR  N GETs of PATH, each on its own
      connection (with reuseport, any worker): the body of the i-th in
      DIR/i.txt, and one line "i STATUS CONTENT-TYPE" each
  nginx-client.py promquery PORT QUERY WANT SECONDS  asks the Prometheus
      server on PORT (its HTTP API, /api/v1/query) for QUERY every 0.5 s
      until its one value is WANT or SECONDS have passed; prints the last
      value read ("none" before the first) and "found 1" or "found 0"
Results are printed as "key value" lines for the shell test to check."""
import http.client, json, socket, struct, sys, threading, time, zlib
import urllib.parse, urllib.request


def png(w, h, rowfn):
    def chunk(t, d):
        return (struct.pack('>I', len(d)) + t + d +
                struct.pack('>I', zlib.crc32(t + d) & 0xffffffff))
    z = zlib.compressobj(9)
    rows = [z.compress(b'\0' + rowfn(y)) for y in range(h)]
    rows.append(z.flush())
    return (b'\x89PNG\r\n\x1a\n' +
            chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
            chunk(b'IDAT', b''.join(rows)) + chunk(b'IEND', b''))


def get(port, path, timeout=10):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        c.request('GET', path)
        r = c.getresponse()
        return r.status, r.read()
    except (OSError, http.client.HTTPException):
        return 0, b''  # closed
    finally:
        c.close()


def wait_for(cond, seconds=60):
    """Wait until cond() is true: no sleep orders anything here.  False
    after SECONDS, a hang limit only."""
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)  # not ordering: the poll of a wait on cond()
    return True


def metric_at_least(port, family, nbytes, seconds=60):
    """Poll /memlimits-metrics until FAMILY reads NBYTES or more, or the
    request is refused (503: the worker is over memlimits_pressure, the
    same fact); prints 'waited FAMILY 1' or 'waited FAMILY 0' (timed out)."""
    def seen():
        st, body = get(port, '/memlimits-metrics')
        if st == 503:
            return True
        for line in body.decode(errors='replace').splitlines():
            f = line.split()
            if (len(f) == 2 and f[0].split('{')[0] == family and
                    float(f[1]) >= nbytes):
                return True
        return False
    ok = wait_for(seen, seconds)
    print('waited', family, 1 if ok else 0)
    return ok


def load(port, html, nord, nbomb):
    ref_static = open(html + '/f4k.bin', 'rb').read()
    st, ref_thumb = get(port, '/thumb/small.png')
    if st != 200 or not ref_thumb:
        print('reference thumbnail failed', st)
        return
    stop = threading.Event()
    lock = threading.Lock()
    res = {'ord_ok': 0, 'ord_bad': 0, 'bomb_ok': 0, 'bomb_bad': 0}
    bad = []
    worst = [0.0]

    done = [0] * nord  # requests each ordinary client has made

    def ordinary(i):
        n = 0
        while not stop.is_set() or n < 2:
            path, ref = (('/f4k.bin', ref_static) if (i + n) % 2 else
                         ('/thumb/small.png', ref_thumb))
            st, body = get(port, path)
            with lock:
                if st == 200 and body == ref:
                    res['ord_ok'] += 1
                else:
                    res['ord_bad'] += 1
                    bad.append('%s %d %d' % (path, st, len(body)))
                done[i] += 1
            n += 1

    def bombs(count):
        for _ in range(count):
            t0 = time.monotonic()
            st, body = get(port, '/thumb/bomb.png')
            dt = time.monotonic() - t0
            with lock:
                worst[0] = max(worst[0], dt)
                # No time limit: make check runs under load (the
                # latency is printed, and docs/nginx.md measures it).
                if st in (0, 503):
                    res['bomb_ok'] += 1
                else:
                    res['bomb_bad'] += 1
                    bad.append('bomb %d %.3f s' % (st, dt))

    ts = [threading.Thread(target=ordinary, args=(i,), daemon=True)
          for i in range(nord)]
    for t in ts:
        t.start()
    # The ordinary load under way: every client has been answered once.
    wait_for(lambda: min(done) >= 1)
    bs = [threading.Thread(target=bombs, args=(nbomb // 2,)),
          threading.Thread(target=bombs, args=(nbomb - nbomb // 2,))]
    for t in bs:
        t.start()
    for t in bs:
        t.join()
    # And it goes on after the bombs: every client answered once more.
    after = list(done)
    wait_for(lambda: all(d > a for d, a in zip(done, after)))
    stop.set()
    for t in ts:
        t.join()
    for k, v in sorted(res.items()):
        print(k, v)
    print('bomb_worst_s %.3f' % worst[0])
    for b in bad[:10]:
        print('bad', b)


def put_start(port, path, size):
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    s.sendall(('PUT %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n'
               'Content-Type: application/octet-stream\r\n\r\n'
               % (path, size)).encode())
    return s


def put_send(s, nbytes):
    chunk = b'x' * (1 << 20)
    try:
        while nbytes > 0:
            n = min(nbytes, len(chunk))
            s.sendall(chunk[:n])
            nbytes -= n
        return True
    except OSError:
        return False


def put_status(s, timeout):
    """The status line's code; 0: closed without an answer; -1: no answer
    in TIMEOUT seconds."""
    s.settimeout(timeout)
    data = b''
    try:
        while b'\r\n' not in data:
            d = s.recv(4096)
            if not d:
                break
            data += d
    except socket.timeout:
        s.close()
        return -1
    except OSError:
        pass
    s.close()
    try:
        return int(data.split(b' ')[1])
    except (IndexError, ValueError):
        return 0  # closed without an answer


def put(port, path, mib):
    size = mib << 20
    t0 = time.monotonic()
    s = put_start(port, path, size)
    put_send(s, min(size, 1 << 20))
    st = put_status(s, 5)
    print('put_status', st)
    print('put_s %.3f' % (time.monotonic() - t0))


def put_full(port, path, mib):
    s = put_start(port, path, mib << 20)
    sent = put_send(s, mib << 20)
    return put_status(s, 10) if sent else 0


def glob(port, big, second):
    stop = threading.Event()
    small = {'ok': 0, 'bad': 0}

    def smalls():
        while not stop.is_set():
            st, body = get(port, '/f4k.bin')
            small['ok' if st == 200 and len(body) == 4096 else 'bad'] += 1
    ts = [threading.Thread(target=smalls, daemon=True) for _ in range(20)]
    for t in ts:
        t.start()
    try:
        glob_puts(port, big, second, small)
    finally:
        stop.set()
    for t in ts:
        t.join()


def glob_puts(port, big, second, small):
    s = put_start(port, '/big', big << 20)  # the holder: sends slowly
    put_send(s, 4 << 20)
    # Its body buffer exists: the worker's heap holds it.
    metric_at_least(port, 'memlimits_heap_bytes', big << 20)
    t0 = time.monotonic()
    st2 = [None]
    t2 = threading.Thread(target=lambda: st2.__setitem__(
        0, put_full(port, '/big', second)))
    t2.start()
    st1 = put_status(s, 5)
    dt = time.monotonic() - t0
    t2.join()
    # The small requests carry on after both: 20 more answered.
    n0 = small['ok'] + small['bad']
    wait_for(lambda: small['ok'] + small['bad'] >= n0 + 20)
    print('big_status', st1)
    print('big_stopped_s %.3f' % dt)
    print('second_status', st2[0])
    print('small_ok', small['ok'])
    print('small_bad', small['bad'])


def shared(port, big, small, n):
    s = put_start(port, '/big', big << 20)  # nginx allocates its buffer
    put_send(s, 4 << 20)
    # The big one's buffer exists first: the budget's total holds it.  Its
    # client sends nothing more: it stalls until it is answered.
    metric_at_least(port, 'memlimits_shared_usage_bytes', big << 20)
    sts = [None] * n

    def one(i):
        sts[i] = put_full(port, '/big', small)
    # The crossing comes after t0: the big one's answer at t0 + dt says it
    # was stopped within dt of the crossing (an upper bound).
    t0 = time.monotonic()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    # The big one's answer: it is never sent the rest of its body.
    st = put_status(s, 20)
    dt = time.monotonic() - t0
    for t in ts:
        t.join()
    print('big_status', st)
    print('big_stopped_s %.3f' % dt)
    print('small_status', ' '.join(str(x) for x in sts))


def put_paced(port, path, mib, rate):
    """A PUT of MIB MiB whose body is sent at RATE bytes a second, in
    64 KiB steps; its status (0: closed, -1: no answer)."""
    s = put_start(port, path, mib << 20)
    step = 1 << 16
    chunk = b'x' * step
    t0 = time.monotonic()
    sent = 0
    try:
        while sent < mib << 20:
            s.sendall(chunk)
            sent += step
            ahead = sent / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)  # not ordering: the pace of the upload
    except OSError:
        return put_status(s, 10)
    return put_status(s, 30)


def bystanders(port, path, small, n, big, rate, runs):
    """RUNS times: N PUTs of SMALL MiB sent at RATE bytes a second; once
    the budget holds their buffers, one PUT of BIG MiB sent at once.
    Prints each run's statuses, and the count of small PUTs not 200."""
    stopped = 0
    for run in range(runs):
        sts = [None] * n

        def one(i):
            sts[i] = put_paced(port, path, small, rate)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        metric_at_least(port, 'memlimits_shared_usage_bytes',
                        (n * small) << 20)
        st = put_full(port, path, big)
        for t in ts:
            t.join()
        stopped += sum(1 for x in sts if x != 200)
        print('run %d big %d small %s' % (run, st, ' '.join(
            str(x) for x in sts)))

        # The next run starts once the budget's total is back down.
        def low():
            sb = get(port, '/memlimits-metrics')[1].decode(errors='replace')
            for line in sb.splitlines():
                f = line.split()
                if f[:1] == ['memlimits_shared_usage_bytes']:
                    return float(f[1]) < (small << 20)
            return False
        wait_for(low)
    print('bystanders_stopped', stopped)


def pressure(port, big, reqs):
    """A slow PUT holds BIG MiB; a GET and REQS meanwhile, and again after
    it ended."""
    s = put_start(port, '/big', big << 20)
    put_send(s, 4 << 20)
    # Its buffer exists: the heap holds it (or the worker already refuses).
    metric_at_least(port, 'memlimits_heap_bytes', big << 20)
    during, _ = get(port, '/f4k.bin')
    ask_all(port, reqs, 'held ')
    s.close()
    # The worker freed it: requests are served again.
    print('served_again', 1 if wait_for(
        lambda: get(port, '/memlimits-metrics')[0] == 200) else 0)
    after, _ = get(port, '/f4k.bin')
    ask_all(port, reqs, 'freed ')
    print('during', during)
    print('after', after)


def ask(port, req):
    """One request read up to the end of its body; http.client cannot be
    used for a PUT answered before its body is sent, and a response
    read to the end of the connection would wait out lingering_timeout."""
    method, path = req.split(':')[:2]
    head = ('%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n'
            % (method, path))
    if req.endswith(':gzip'):
        head += 'Accept-Encoding: gzip\r\n'
    if method == 'PUT':
        head += 'Content-Length: %d\r\n' % (512 << 20)
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    s.sendall((head + '\r\n').encode())
    if method == 'PUT':
        put_send(s, 1 << 20)
    data = b''
    try:
        while b'\r\n\r\n' not in data:
            d = s.recv(65536)
            if not d:
                break
            data += d
        hdr, _, body = data.partition(b'\r\n\r\n')
        lines = hdr.decode('latin-1').split('\r\n')
        st = int(lines[0].split(' ')[1])
        h = {}
        for line in lines[1:]:
            k, _, v = line.partition(':')
            h[k.strip().lower()] = v.strip()
        n = int(h.get('content-length', '-1'))
        while n < 0 or len(body) < n:
            d = s.recv(65536)
            if not d:
                break
            body += d
    except (OSError, IndexError, ValueError):
        return '%s 0 - - 0 -' % req, b''
    finally:
        s.close()
    return '%s %d %s %s %d %s' % (req, st, h.get('content-length', '-'),
                                  h.get('content-encoding', '-'), len(body),
                                  h.get('content-type', '-').split(';')[0]), body


def ask_all(port, reqs, prefix=''):
    for req in reqs:
        line, body = ask(port, req)
        print(prefix + line)
        print(prefix + req, 'body', repr(body[:60]))


def metrics(port, path, n, out):
    for i in range(n):
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
        try:
            c.request('GET', path, headers={'Connection': 'close'})
            r = c.getresponse()
            body = r.read()
            st, ct = r.status, r.getheader('Content-Type', '-')
        except (OSError, http.client.HTTPException):
            st, ct, body = 0, '-', b''
        finally:
            c.close()
        open('%s/%d.txt' % (out, i), 'wb').write(body)
        print(i, st, ct)


def promquery(port, query, want, seconds):
    url = ('http://127.0.0.1:%d/api/v1/query?query=%s'
           % (port, urllib.parse.quote(query)))
    last = 'none'
    end = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                res = json.load(r)['data']['result']
            if len(res) == 1:
                last = res[0]['value'][1]
        except (OSError, ValueError, KeyError, IndexError):
            pass  # not up yet, or nothing scraped yet
        if last == want or time.monotonic() > end:
            break
        time.sleep(0.5)  # not ordering: the poll of a bounded wait
    print('value', last)
    print('found', 1 if last == want else 0)


def main(a):
    if a[0] == 'png':
        if a[1] == 'bomb':
            n = int(a[3])
            row = bytes(3 * n)
            data = png(n, n, lambda y: row)
        else:
            data = png(200, 200,
                       lambda y: bytes((x + y) & 255 for x in range(600)))
        open(a[2], 'wb').write(data)
    elif a[0] == 'get':
        st, body = get(int(a[1]), a[2])
        print(st, len(body))
    elif a[0] == 'load':
        load(int(a[1]), a[2], int(a[3]), int(a[4]))
    elif a[0] == 'put':
        put(int(a[1]), a[2], int(a[3]))
    elif a[0] == 'pressure':
        pressure(int(a[1]), int(a[2]), a[3:])
    elif a[0] == 'ask':
        ask_all(int(a[1]), a[2:])
    elif a[0] == 'global':
        glob(int(a[1]), int(a[2]), int(a[3]))
    elif a[0] == 'shared':
        shared(int(a[1]), int(a[2]), int(a[3]), int(a[4]))
    elif a[0] == 'bystanders':
        bystanders(int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]),
                   float(a[6]), int(a[7]))
    elif a[0] == 'metrics':
        metrics(int(a[1]), a[2], int(a[3]), a[4])
    elif a[0] == 'promquery':
        promquery(int(a[1]), a[2], a[3], float(a[4]))


main(sys.argv[1:])
