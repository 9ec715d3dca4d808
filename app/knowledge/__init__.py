"""Knowledge: the user's documents, behind store protocols like :mod:`app.stores`.

:mod:`.files` is the Files API's store (``/v1/files``; the Batch API's input and output files
too) and its contract; :mod:`.local_files` (SQLite + a directory, the embedded default) and
:mod:`.postgres_files` (``[store] url``) implement it.  Vector stores and ``file_search`` go
beside them (issue 36)."""
