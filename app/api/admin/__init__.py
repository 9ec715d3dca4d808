"""The operator's side: the admin API (``/admin``: keys, usage, models, live runs, errors) and
the console that drives it (``/console``), both behind the admin key only."""
