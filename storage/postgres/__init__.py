"""The PostgreSQL store: the same ports as the SQLite one, for more than one machine
(docs/storage.md, "PostgreSQL"). Selected by ``PLANGATE_DATABASE_URL``."""

from __future__ import annotations

URL_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.startswith(URL_SCHEMES)
