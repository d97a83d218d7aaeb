from django.urls import path

from examples.django_project.orders import views

urlpatterns = [
    path("orders", views.create_order, name="create-order"),
]
