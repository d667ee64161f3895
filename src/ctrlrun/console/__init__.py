"""The operator's console: a small web app over a ctrlrun store (extra ``ctrlrun[console]``).

Server-rendered HTML (Jinja2 with autoescape on every template: nothing an agent controls is
ever formatted into markup by hand), a little JavaScript without a build step, and the same
loopback guards as ``ctrlrun serve`` (``ctrlrun.loopback.HostGuard``, ``ctrlrun.serving``).
One module per page: ``inbox`` (approvals), ``effects``, ``receipts``, ``durable`` (plans,
outbox, operations), ``documents`` (the editor and its API); ``auth`` signs people in
and guards every form with a CSRF token; ``app`` assembles them. Imported only by
``ctrlrun console`` and the tests, never by ``import ctrlrun``.
"""
