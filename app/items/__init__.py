"""Items: the stored, wire-form unit of Open Responses context, and what every API that keeps
or replays them needs (the responses API, conversations, the agentic loop's later turns).

* :mod:`.messages` — request ``input`` → stored items (ids filled in), and stored items →
  the internal :class:`~app.core.conversation.Message` s the prompt formats render
  (hosted-tool items re-rendered as the calls they were);
* :mod:`.names` — how a namespaced or custom tool's call is named and wrapped for the model;
* :mod:`.validate` — the ingest rules the APIs share (names, call ids, JSON schemas);
* :mod:`.resolve` — a context made ready for the model: ``input_file`` parts read
  (:mod:`.files` in :mod:`.file_jobs`' bounded pool), compaction items opened;
* :mod:`.sealing` / :mod:`.compact` — encrypted reasoning and compaction items.

It knows :mod:`app.core`, :mod:`app.tools` (the hosted tools' model-facing names) and
:mod:`schemas`; the APIs build on it.
"""
