"""Where the APIs keep state: the store protocols and their contract (:mod:`.base`), the
SQLite implementations (the embedded default) and an in-memory one (:mod:`.memory`)."""
