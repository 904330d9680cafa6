"""The ASGI application, as startproject writes it, wrapped in memlimits'
middleware: async views run in the request's task step by step, sync
views (which Django runs through asgiref's sync_to_async, on a thread of
a pool) as slices of it on that thread.

    uvicorn --loop asyncio django_app.asgi:application"""
import os

from django.core.asgi import get_asgi_application

from memlimits.asgi import LimitMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")

application = LimitMiddleware(get_asgi_application(), held="64MiB")
