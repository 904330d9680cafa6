"""The WSGI application, as startproject writes it, wrapped in memlimits'
middleware: the whole request, Django's own handling and its middleware
included, runs in the request's task.

    gunicorn --worker-class gthread --threads 4 django_app.wsgi"""
import os

from django.core.wsgi import get_wsgi_application

from memlimits.wsgi import LimitMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")

application = LimitMiddleware(get_wsgi_application(), held="64MiB")
