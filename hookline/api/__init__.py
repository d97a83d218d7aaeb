"""What a web process calls: ``send_webhook`` (one event for one endpoint,
``hookline.api.enqueue``) and ``publish`` (one event for every subscribed endpoint of an
application, ``hookline.api.publishing``).

Users import these from the package itself (``hookline.send_webhook``, ``hookline.publish``);
this package is where they live, above the delivery layer and beside ``cli`` and ``contrib``.
Nothing is imported here, so ``import hookline`` stays free of Celery until a call needs it.
"""
