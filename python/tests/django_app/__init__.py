"""A minimal Django project, as ``django-admin startproject`` lays one
out, that test_django.py serves under gunicorn (``django_app.wsgi``) and
uvicorn (``django_app.asgi``), each wrapped in memlimits' middleware the
way docs/python.md, "Django", tells a Django user to."""
