from django.urls import path

from . import views

urlpatterns = [
    path("", views.ordinary),
    path("async", views.ordinary_async),
    path("runaway", views.runaway),
    path("async-runaway", views.runaway_async),
    path("stream-runaway", views.runaway_stream),
]
