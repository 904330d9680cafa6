"""The views: an ordinary one of each kind (a little JSON work and a
query on the sqlite database; body "ok PID KIND"), a runaway of each
kind and a streaming response whose iterator runs away.  Each runaway
appends strings to a list until it is stopped (or, not stopped, answers
"not stopped" at about 500 MB: a failed check rather than a machine out
of memory)."""
import asyncio
import os

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpResponse, StreamingHttpResponse

from servers_app import RUNAWAY_END, ordinary_work, run_away


def query():
    with connection.cursor() as c:
        c.execute("SELECT %s + 1", [41])
        return c.fetchone()[0]


def ordinary(request):
    assert ordinary_work() == 100 and query() == 42
    return HttpResponse("ok %d sync\n" % os.getpid(),
                        content_type="text/plain")


async def ordinary_async(request):
    assert ordinary_work() == 100
    # The ORM is synchronous in Django 3.2: an async view reaches it
    # through sync_to_async, as Django's documentation says to.
    assert await sync_to_async(query)() == 42
    return HttpResponse("ok %d async\n" % os.getpid(),
                        content_type="text/plain")


def runaway(request):
    keep = []
    while len(keep) < RUNAWAY_END:
        run_away(keep)
    return HttpResponse("not stopped %d\n" % os.getpid(),
                        content_type="text/plain")


async def runaway_async(request):
    keep = []
    while len(keep) < RUNAWAY_END:
        run_away(keep)
        # not ordering: a yield, the loop's other requests run meanwhile
        await asyncio.sleep(0)
    return HttpResponse("not stopped %d\n" % os.getpid(),
                        content_type="text/plain")


def grow_stream():
    # The headers and a first chunk go out before it runs away: a stop
    # then can only cut the body where it is.
    keep = []
    yield "start\n"
    while len(keep) < RUNAWAY_END:
        run_away(keep)
        yield "."
    yield "not stopped\n"


def runaway_stream(request):
    return StreamingHttpResponse(grow_stream(), content_type="text/plain")
