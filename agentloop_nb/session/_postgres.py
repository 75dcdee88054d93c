"""``PostgresPersistence``: sessions in a shared PostgreSQL database, written behind the loop.

Layout (in schema ``schema``, created on first use): ``agentloop_sessions(id, created_at,
header)`` holds one header per session and ``agentloop_events(session_id, seq, event)`` one row
per event; ``header`` and ``event`` are the exact JSON texts the JSONL backend writes as lines,
so both backends read records through the same decoder and checks. A batch of events is one
transaction: a crash loses whole uncommitted batches, never half a record, so a resume needs
only the log-level ``repair`` (open tool calls and turns), not a torn-tail cut.

One writer per session: while a session is attached this backend holds the PostgreSQL session
advisory lock of its id on a dedicated connection, and records ``(pid, host)`` beside it; a
second backend (another App, kernel or machine on the same database) that creates or resumes
the id gets ``SessionLockedError`` naming that holder. The server drops the lock when the
holder's connection ends, so a killed process never bricks a session.

Write-behind: the same ``_writebehind.WriteBehind`` as ``JsonlPersistence`` (``install(ctx)``,
an O(1) watcher of each session it writes, a worker thread that writes batches on its own connection and advances
``session.durable_seq``, ``session/flush`` a barrier behind everything enqueued before it).

The storage primitives (``create``/``append``/``load``/``list``/``acquire``) are synchronous,
as the seam requires (resume loads inside a synchronous creation step); they use psycopg 3's
blocking connections. Requires the ``postgres`` extra (``pip install agentloop_nb[postgres]``).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import socket
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import MissingDependencyError
from ._events import SessionEvent, SessionHeader
from ._jsonl_codec import encode_lines, parse_log
from ._listing import StoredSession, headers_of, ordered, parse_header
from ._persistence import (
    Lease,
    PersistenceError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
    reserve,
)
from ._session import Session, SessionPayload
from ._writebehind import WriteBehind

__all__ = ["PostgresPersistence"]

_SCHEMA_LOCK = 0x6167_6C6F  # advisory key serialising concurrent schema creation

_DDL = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.agentloop_sessions (
    id text PRIMARY KEY,
    created_at double precision NOT NULL,
    header text NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.agentloop_events (
    session_id text NOT NULL REFERENCES {schema}.agentloop_sessions (id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    event text NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS {schema}.agentloop_writers (
    id text PRIMARY KEY,
    pid bigint NOT NULL,
    host text NOT NULL
);
"""


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "PostgresPersistence needs psycopg 3: pip install 'agentloop_nb[postgres]'"
        ) from exc
    return psycopg


class _Held:
    """A session advisory lock this backend holds; ``owner`` is the attached session (``None``
    while reserved by ``acquire`` for a resume in progress)."""

    __slots__ = ("id", "owner")

    def __init__(self, id: str) -> None:
        self.id = id
        self.owner: Session | None = None


class PostgresPersistence(WriteBehind):
    """Sessions stored in PostgreSQL at ``dsn`` (a libpq URL or key=value string).

    ``schema`` names the PostgreSQL schema holding the tables (created when missing). Every
    App sharing a database and schema sees the same sessions: one can resume what another
    wrote, once that one has disposed the session (one writer per session, see the module
    docstring). Raises ``PersistenceError`` naming the database when it cannot be reached.
    """

    _worker_name = "agentloop_nb-postgres"
    _label = "PostgreSQL"

    def __init__(self, dsn: str, *, schema: str = "public") -> None:
        super().__init__()
        self.dsn = dsn
        self.schema = schema
        self._psycopg = _import_psycopg()
        self._mutex = threading.RLock()  # guards the shared connection and the lock table
        self._conn: Any = None  # reads, schema and advisory locks (the locks live with it)
        self._held: dict[str, _Held] = {}
        self._worker_conn: Any = None  # the worker thread's own connection (its writes)

    def __repr__(self) -> str:
        return f"PostgresPersistence(schema={self.schema!r})"

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> Any:
        try:
            conn = self._psycopg.connect(self.dsn, autocommit=True, application_name="agentloop_nb")
        except self._psycopg.Error as exc:
            raise PersistenceError(
                f"cannot connect to the session database ({exc}); check the persistence URL "
                "and that the server is running",
                id="",
            ) from exc
        return conn

    def _ddl(self, conn: Any) -> None:
        sql = self._psycopg.sql
        text = _DDL.format(schema="{schema}")
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in filter(str.strip, text.split(";")):
                conn.execute(sql.SQL(statement).format(schema=sql.Identifier(self.schema)))

    def _shared(self) -> Any:
        """The shared connection (call with ``_mutex`` held); created with the schema."""
        if self._conn is None or self._conn.closed:
            conn = self._connect()
            # A backend dropped without ``aclose`` still closes its connection (and so gives
            # back its locks) when it is collected.
            weakref.finalize(self, conn.close)
            self._ddl(conn)
            self._conn = conn
        return self._conn

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._mutex:
            yield self._shared().cursor()

    def _where(self, id: str) -> Path:
        """What errors name as the session's location (errors carry a ``Path``)."""
        return Path(f"postgresql:{self.schema}/{id}")

    def _table(self, name: str) -> Any:
        sql = self._psycopg.sql
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    # -- the seam (synchronous primitives) ---------------------------------------------------

    def create(self, header: SessionHeader) -> None:
        """Store a new session's header. ``FileExistsError`` when the id is already stored
        (never overwritten)."""
        query = self._psycopg.sql.SQL(
            "INSERT INTO {} (id, created_at, header) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO NOTHING"
        ).format(self._table("agentloop_sessions"))
        with self._cursor() as cur:
            cur.execute(query, (header.id, header.created_at, header.to_json()))
            if cur.rowcount != 1:
                raise SessionExistsError(
                    f"session {header.id!r} is already stored in the database; resume it or "
                    "choose another id"
                )

    def append(self, id: str, events: Sequence[SessionEvent]) -> None:
        """Append events in one transaction. ``SessionNotFoundError`` when the session is not
        stored; ``PersistenceError`` when a ``seq`` is already stored (another writer)."""
        if events:
            with self._mutex:
                self._append_on(self._shared(), id, events)

    def _append_on(self, conn: Any, id: str, events: Sequence[SessionEvent]) -> None:
        psycopg = self._psycopg
        lines = encode_lines(events).decode("utf-8").split("\n")
        rows = [(id, e.seq, line) for e, line in zip(events, lines, strict=False)]
        copy = psycopg.sql.SQL("COPY {} (session_id, seq, event) FROM STDIN").format(
            self._table("agentloop_events")
        )
        try:
            with conn.transaction(), conn.cursor() as cur, cur.copy(copy) as out:
                for row in rows:
                    out.write_row(row)
        except psycopg.errors.ForeignKeyViolation:
            raise SessionNotFoundError(f"session {id!r} is not stored", id=id) from None
        except psycopg.errors.UniqueViolation as exc:
            raise PersistenceError(
                f"cannot append to session {id!r}: an event with the same seq is already "
                "stored (another writer appended to it); resume it again",
                id=id,
            ) from exc

    def load(self, id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """Read a stored session: its header and its events in ``seq`` order. Raises
        ``SessionNotFoundError`` for an unknown id and ``SessionCorruptError`` (naming the
        record's 1-based line, header = 1) for a record that cannot be read."""
        with self._cursor() as cur:
            cur.execute(
                self._psycopg.sql.SQL("SELECT header FROM {} WHERE id = %s").format(
                    self._table("agentloop_sessions")
                ),
                (id,),
            )
            row = cur.fetchone()
            if row is None:
                raise SessionNotFoundError(
                    f"session {id!r} not found in the session database (schema {self.schema!r})",
                    id=id,
                )
            cur.execute(
                self._psycopg.sql.SQL(
                    "SELECT event FROM {} WHERE session_id = %s ORDER BY seq"
                ).format(self._table("agentloop_events")),
                (id,),
            )
            lines = [row[0], *(r[0] for r in cur)]
        raw = ("\n".join(lines) + "\n").encode("utf-8")
        return parse_log(self._where(id), id, raw)

    def scan(self) -> builtins.list[StoredSession]:
        """Every stored session from the header table alone (never its events): readable ones
        oldest first, then the unreadable ones with the reason."""
        with self._cursor() as cur:
            cur.execute(
                self._psycopg.sql.SQL("SELECT id, header FROM {}").format(
                    self._table("agentloop_sessions")
                )
            )
            rows = cur.fetchall()
        return ordered(parse_header(id, str(self._where(id)), text) for id, text in rows)

    def list(self) -> builtins.list[SessionHeader]:
        """Headers of every readable stored session (the header table only), oldest first;
        each unreadable header is logged as a warning (see :meth:`scan`)."""
        return headers_of(self.scan())

    # -- one writer per session --------------------------------------------------------------

    def acquire(self, id: str) -> Lease:
        """Reserve the writer lock of session ``id`` before loading it to resume it.

        Raises ``SessionLockedError`` (naming the holder's pid and host) when another writer
        has it attached. Publication adopts the lease and disposal releases it; call
        ``lease.release()`` when the resume fails before publication. When this backend
        already has the id attached to a live session the lease is empty (the session store
        reports that conflict).
        """
        with self._mutex:
            return reserve(self._held.get(id), lambda: self._lock(id), self._unlock)

    def _lock(self, id: str) -> _Held:
        """Take the advisory lock of ``id`` (with ``_mutex`` held) or raise naming its holder."""
        writers = self._table("agentloop_writers")
        sql = self._psycopg.sql
        with self._shared().cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (id,))
            row = cur.fetchone()
            if not (row and row[0]):
                cur.execute(
                    sql.SQL("SELECT pid, host FROM {} WHERE id = %s").format(writers), (id,)
                )
                found = cur.fetchone()
                holder: dict[str, object] = (
                    {"pid": found[0], "host": found[1]} if found is not None else {}
                )
                raise SessionLockedError(
                    id,
                    self._where(id),
                    holder,
                )
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (id, pid, host) VALUES (%s, %s, %s) "
                    "ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, host = excluded.host"
                ).format(writers),
                (id, os.getpid(), socket.gethostname()),
            )
        held = self._held[id] = _Held(id)
        return held

    def _unlock(self, held: _Held) -> None:
        with self._mutex:
            if self._held.get(held.id) is not held:
                return
            del self._held[held.id]
            conn = self._conn
            if conn is None or conn.closed:
                return  # the server already dropped the lock with the connection
            with contextlib.suppress(self._psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (held.id,))

    def _release(self, session: Session) -> None:
        with self._mutex:
            held = self._held.get(session.id)
            if held is not None and held.owner is session:
                self._unlock(held)

    # -- write-behind (the queue, worker and flush barrier are ``WriteBehind``'s) ---------

    def _on_created(self, payload: SessionPayload) -> None:
        # Synchronous checks, so a second writer or an existing id vetoes the creation (or
        # resume) before anything is published.
        session = payload.session
        with self._mutex:
            held = self._held.get(session.id)
            fresh = held is None
            if held is None:
                held = self._lock(session.id)
            elif held.owner is not None and held.owner.state != "detached":
                holder: dict[str, object] = {"pid": os.getpid(), "host": socket.gethostname()}
                path = self._where(session.id)
                raise SessionLockedError(session.id, path, holder)
            try:
                if not session.header_durable and self._stored(session.id):
                    raise SessionExistsError(
                        f"session {session.id!r} is already stored in the database; resume "
                        "it or choose another id"
                    )
            except BaseException:
                if fresh:
                    self._unlock(held)
                raise
            held.owner = session
        self._open(session)

    def _stored(self, id: str) -> bool:
        with self._cursor() as cur:
            cur.execute(
                self._psycopg.sql.SQL("SELECT 1 FROM {} WHERE id = %s").format(
                    self._table("agentloop_sessions")
                ),
                (id,),
            )
            return cur.fetchone() is not None

    def _closed(self) -> None:
        # Closing the shared connection gives back every advisory lock this backend holds.
        with self._mutex:
            self._held.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- the worker thread -------------------------------------------------------------------

    def _begin_round(self) -> None:
        conn = self._worker_conn
        if conn is None or conn.closed:
            try:
                self._worker_conn = self._connect()
            except PersistenceError:
                self._worker_conn = None  # every write of this round fails, recorded per session

    def _end_worker(self) -> None:
        conn, self._worker_conn = self._worker_conn, None
        if conn is not None:
            conn.close()

    def _connection(self) -> Any:
        conn = self._worker_conn
        if conn is None:
            raise ConnectionError("the session database cannot be reached")
        return conn

    def _store_header(self, header: SessionHeader) -> None:
        self._create_on(self._connection(), header)

    def _store_events(self, id: str, events: Sequence[SessionEvent]) -> None:
        self._append_on(self._connection(), id, events)

    def _create_on(self, conn: Any, header: SessionHeader) -> None:
        query = self._psycopg.sql.SQL(
            "INSERT INTO {} (id, created_at, header) VALUES (%s, %s, %s)"
        ).format(self._table("agentloop_sessions"))
        conn.execute(query, (header.id, header.created_at, header.to_json()))

    def _failure(self, session: Session, exc: Exception) -> PersistenceError:
        return (
            exc
            if isinstance(exc, PersistenceError)
            else PersistenceError(
                f"cannot write session {session.id!r} to the database ({exc}); events after "
                f"seq {session.durable_seq} are not stored; nothing more is written for this "
                "session until it is disposed and resumed",
                id=session.id,
            )
        )
