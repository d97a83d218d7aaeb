from django.contrib import admin
from django.urls import include, path

from examples.django_project.orders import views

urlpatterns = [
    path("orders", views.create_order, name="create-order"),
    path("admin/", admin.site.urls),
    # The Hookline console, behind the staff sign-in and the hookline.*_console permissions.
    path("hookline/", include("hookline.contrib.django.console")),
]
