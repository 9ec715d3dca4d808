"""The Batch API's engine room: batches and their lines in the store (:mod:`.model`,
:mod:`.sqlite_batches`), the input file's checks (:mod:`.validate`) and the worker that runs
lines behind interactive traffic (:mod:`.runner`).  The routes are in :mod:`app.api.batches`;
a line runs through the gateway's own route, called in process (:mod:`app.http.internal`)."""
