"""The service layer: the rules behind every operator action and view, shared by every face.

The CLI, the console and the tenant portal call these functions and keep only parsing, rendering
and printing; no rule lives in a face. The layer's rules:

- Every public function takes the :class:`~hookline.service.actor.Actor` first: who acts, from
  which session.
- A mutation calls ``actor.require_act(action)`` first (a read-only actor gets
  :class:`~hookline.service.actor.ReadOnly`, enforced here, not by a hidden button) and appends
  one entry to the audit log (:mod:`hookline.service.audit`) once it is done.
- A scoped actor (``app_scope``, the portal) sees only its own application: an endpoint of
  another application, and that endpoint's events, attempts and dead letters, are
  :class:`~hookline.service.actor.NotFound`, the same error as an unknown one, so that nothing
  tells whether it exists.
- Lists are pages (:class:`~hookline.service.pages.Page`): a cursor and a limit, never a scan of
  everything.
- A view never carries a secret or a header value: secrets are masked, headers are names.

It imports the core, the store, the transport and the delivery layer; never the worker or a face.
"""
