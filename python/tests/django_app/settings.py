"""Settings of the test project: what a small production project has
(DEBUG off, the usual security and common middleware, a sqlite
database), and the logging a user adds so that memlimits' line for each
stopped request reaches the server's log, with Django's own request
errors (django.request), which test_django.py checks are not logged for
a stopped request."""
import os

SECRET_KEY = "memlimits-test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "django_app.urls"
INSTALLED_APPS = []
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]
# The test gives each server a database file in its own temporary
# directory; the ordinary views run a query on it.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_APP_DB", ":memory:"),
    }
}
USE_TZ = True
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"memlimits": {"handlers": ["console"],
                              "level": "WARNING", "propagate": False},
                "django.request": {"handlers": ["console"],
                                   "level": "ERROR", "propagate": False}},
}
