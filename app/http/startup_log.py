"""Start-up warnings said once per ``serve``, not once per worker.

With ``serve --workers N`` every worker builds the app and runs its start-up, so a warning about
the configuration ("[responses] encryption_key is not set", a web-search index line skipped,
the OpenTelemetry SDK missing) was logged N times, and again by each worker that replaced a
dead one.  :class:`OncePerServe` is a filter on the gateway's logger, in place from
:func:`create_app` to the end of the lifespan's start-up only (:func:`during_startup`): a
warning passes in the first worker that says it; the others drop the same text.  "Said" is a
file named by the text's SHA-256 in the machine service's private directory (the 0700
``mkdtemp`` of :mod:`app.cli.limits_service`, found from ``OCMGW_METRICS_SOCKET``), created
with ``O_EXCL``, so the first worker to say it wins without any round trip; the directory goes
with the ``serve``.  Warnings after start-up (a failure while serving) are every worker's own
and are never filtered.  Without that directory (one worker) nothing is filtered; if a marker
cannot be written the warning passes (said twice rather than never).
"""

from __future__ import annotations

import hashlib
import logging
import os

from app.http.machine_metrics import METRICS_ENV

log = logging.getLogger("ocm_gateway")


class OncePerServe(logging.Filter):
    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        digest = hashlib.sha256(record.getMessage().encode("utf-8", "replace")).hexdigest()[:32]
        try:
            fd = os.open(os.path.join(self.directory, f"said-{digest}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False  # another worker said it
        except OSError:
            return True
        os.close(fd)
        return True


def during_startup() -> OncePerServe | None:
    """Install the filter on the gateway's logger when this process is one of ``serve``'s
    workers (None otherwise); remove it with :func:`started`."""
    path = os.environ.get(METRICS_ENV)
    if not path:
        return None
    once = OncePerServe(os.path.dirname(path))
    log.addFilter(once)
    return once


def started(once: OncePerServe | None) -> None:
    if once is not None:
        log.removeFilter(once)
