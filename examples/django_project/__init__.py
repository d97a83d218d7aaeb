"""A minimal Django project that sends ``order.created`` webhooks with Hookline: see
``orders/views.py`` and the README's "Django" section."""
