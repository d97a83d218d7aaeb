"""The delivery engine (one attempt, returning its outcome), the HTTP sender, retries, replay
and the releaser."""
