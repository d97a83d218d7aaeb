from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "examples.django_project.orders"
    label = "orders"
