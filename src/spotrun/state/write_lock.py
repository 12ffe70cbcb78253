"""SQLite's write lock taken at once, for a transaction that reads, decides and then writes.

Python's sqlite3 begins a transaction at its first write only: the reads before it run outside any lock, and another
writer may change what they read before this transaction writes (two changes that each read "there is another
admin" both pass). A write that changes nothing, first, takes the database's write lock and holds it to the commit:
the transaction's reads then see what it will write over. PostgreSQL locks rows instead (`SELECT ... FOR UPDATE`,
which SQLite's dialect does not render), so nothing is done there.
"""

from __future__ import annotations

from sqlalchemy import false, update
from sqlalchemy.orm import Session

from spotrun.state.models import Job


def take_sqlite_write_lock(session: Session) -> None:
    if session.get_bind().dialect.name == "sqlite":
        session.execute(update(Job).where(false()).values(id=Job.id), execution_options={"synchronize_session": False})
