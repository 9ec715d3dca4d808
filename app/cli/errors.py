"""Error messages of the ``ocm-gateway`` CLI that say what to do.

``config_problem(path, exc)``: the config file (``--config`` or ``$OCMGW_CONFIG``) could not be
read; the message names the file, the reason and the fix.
"""

from __future__ import annotations

import os


def config_problem(path: str | None, exc: OSError) -> str:
    source = f"--config {path}" if path else f"OCMGW_CONFIG={os.environ.get('OCMGW_CONFIG', '')}"
    name = exc.filename if exc.filename is not None else path
    reason = exc.strerror or str(exc)
    return (f"cannot read the config file {name} ({source}): {reason}. Pass --config with the path "
            "of an existing TOML file (config.example.toml in the repository is a starting point), "
            "or unset OCMGW_CONFIG to run from environment variables alone.")
