"""The transport: everything in Hookline that knows kombu's and Celery's internals.

Its layer sits between the store and the delivery engine (``core -> store -> transport ->
delivery -> worker -> faces``): it may use the core and the store, never the layers above.

- ``redis``, ``push`` and ``sentinel``: kombu's Redis channel, made so that a worker dying at
  any instant loses no message (the consume script, the doorbells, parking held deliveries),
  its publishing side (the doorbell, the publish that claims the event id), and the same on
  a master that Redis Sentinel finds.
- ``unacked``, ``records`` and ``receipt``: the unacknowledged messages (kombu's QoS with the
  records set, the record's format and readers, and the acknowledgement folded into a
  delivery's settle).
- ``liveness``: each consuming process's heartbeat, and the restore of a dead one's messages.
- ``amqp``, ``rabbitmq``: what Celery puts on the wire and shows Flower; RabbitMQ as broker.
- ``envelope``: the broker message kombu's Redis transport pushes, built without a broker.
- ``celery_settings``, ``celery_app``, ``compat``, ``errors``: the Celery settings (public as
  ``hookline.celeryconfig``), the publishing app, the version fence and kombu's exceptions.
- ``malformed``: what is not a message is kept as a dead letter, never dropped.
- ``gauges``: the Prometheus gauges read from Redis and the broker, and the metrics servers.

Importing this package loads nothing: each module is imported by name.
"""
