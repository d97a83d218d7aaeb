"""The pure core: settings, policy, SSRF rules, what a valid event is, the wire contract, logs
and metric definitions. Nothing here imports Celery or talks to Redis."""
