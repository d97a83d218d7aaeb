"""The task definitions, as the design card names them: ``tasks.webhooks.deliver``.

The task itself is defined in ``hookline.worker.tasks`` (the installed distribution ships only
the ``hookline`` package); the worker loads it by that name through Celery's ``include``.
"""
