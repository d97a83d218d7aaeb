"""Celery task definitions only: thin wrappers around ``app.delivery``."""
