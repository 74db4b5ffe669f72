"""Storage tests: the store contracts, SQLite specifics, crash and replay."""
