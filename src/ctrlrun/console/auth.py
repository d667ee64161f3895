"""Who is signed in, and that every form they post came from a page this console served.

Two ways to sign in, chosen when the console starts:

* **Accounts file**: one ``name:hash`` per line (``#`` comments and blank lines ignored), each
  hash an Argon2 string from ``argon2-cffi`` (salted; ``ctrlrun console-account`` prints
  one). A successful sign-in starts a server-side session: a random id in a cookie that is
  ``HttpOnly``, ``SameSite=Strict``, ``Secure`` and scoped to ``/``; the session holds the
  person's name and a random CSRF token and lapses after ``SESSION_TTL``.
* **Trusted header** (``--trusted-header X-Remote-User``): a reverse proxy in front has
  authenticated the person and names them in that header; the CSRF token is then an HMAC of
  the name under a secret the console draws at start.

Failed passwords slow further sign-ins per account and per client address
(``console.throttle``): a throttled attempt is refused before its password is checked.

Every POST must carry the CSRF token of its session (``checked_form``); a missing or wrong one
is answered 403 and nothing is done. Host and Origin are checked before any of this
(``ctrlrun.loopback.HostGuard``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

from ctrlrun._time import Clock, utc_now
from ctrlrun.console.throttle import Throttle
from ctrlrun.errors import InvalidArgument

COOKIE: Final = "ctrlrun_console"
SESSION_TTL: Final = timedelta(hours=8)
CSRF_FIELD: Final = "csrf"


@dataclass(frozen=True, slots=True)
class Person:
    """A signed-in person: the name answers are recorded under, and their form token."""

    name: str
    csrf: str


def load_accounts(path: Path) -> dict[str, str]:
    """``name -> argon2 hash`` from an accounts file; a malformed line is an ``InvalidArgument``
    naming its line number (never its content: it may hold a hash)."""
    accounts: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, hashed = line.partition(":")
        if not sep or not name.strip() or not hashed.startswith("$argon2"):
            raise InvalidArgument(f"{path}: line {number} is not name:$argon2…")
        accounts[name.strip()] = hashed.strip()
    return accounts


def hash_password(password: str) -> str:
    """A salted Argon2id hash of ``password`` for the accounts file."""
    from argon2 import PasswordHasher

    return PasswordHasher().hash(password)


class Gate:
    """Sign-in, sessions and CSRF for one console process (sessions live in memory: a
    restart signs everyone out, which is the safe direction)."""

    def __init__(
        self,
        accounts: dict[str, str] | None = None,
        *,
        trusted_header: str | None = None,
        secure_cookie: bool = True,
        clock: Clock = utc_now,
    ) -> None:
        self.accounts = accounts or {}
        self._clock = clock
        self.throttle = Throttle(clock=clock)  # failed passwords, per account and address
        self.trusted_header = trusted_header.lower() if trusted_header else None
        self.secure_cookie = secure_cookie
        self._secret = secrets.token_bytes(32)
        self._sessions: dict[str, tuple[Person, datetime]] = {}
        self._lock = threading.Lock()

    # --- who is this --------------------------------------------------------------------

    def person(self, request: Request) -> Person | None:
        """The signed-in person making ``request``, or None."""
        if self.trusted_header is not None:
            name = request.headers.get(self.trusted_header, "").strip()
            return Person(name, self._header_token(name)) if name else None
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        with self._lock:
            held = self._sessions.get(_digest(sid))
            if held is None or held[1] < self._clock():
                self._sessions.pop(_digest(sid), None)
                return None
        return held[0]

    def _header_token(self, name: str) -> str:
        return hmac.new(self._secret, name.encode(), hashlib.sha256).hexdigest()

    # --- signing in and out -------------------------------------------------------------

    def sign_in(self, name: str, password: str, address: str | None = None) -> str | None:
        """A new session id if ``password`` is ``name``'s, else None (same work either way:
        an unknown name is verified against a dummy hash, so timing does not tell). The
        outcome is counted by ``throttle`` for ``name`` and the client ``address``; ask
        ``throttle.wait`` first."""
        if not self._verified(name, password):
            self.throttle.failed(name, address)
            return None
        self.throttle.succeeded(name, address)
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[_digest(sid)] = (
                Person(name, secrets.token_urlsafe(32)),
                self._clock() + SESSION_TTL,
            )
        return sid

    def _verified(self, name: str, password: str) -> bool:
        from argon2 import PasswordHasher
        from argon2.exceptions import InvalidHashError, VerificationError

        hashed = self.accounts.get(name, _DUMMY_HASH)
        try:
            PasswordHasher().verify(hashed, password)
        except (VerificationError, InvalidHashError):
            return False
        return name in self.accounts

    def sign_out(self, request: Request) -> None:
        """End the request's session, if any."""
        sid = request.cookies.get(COOKIE)
        if sid:
            with self._lock:
                self._sessions.pop(_digest(sid), None)

    # --- forms --------------------------------------------------------------------------

    async def checked_form(self, request: Request) -> tuple[Person, FormData]:
        """The signed-in person and the posted form, or 403 (not signed in, or the form's
        CSRF token is not their session's)."""
        person = self.person(request)
        form = await request.form()
        token = form.get(CSRF_FIELD)
        if (
            person is None
            or not isinstance(token, str)
            or not hmac.compare_digest(token.encode(), person.csrf.encode())
        ):
            raise HTTPException(403, "refused: not signed in, or the form is not this session's")
        return person, form


def _digest(sid: str) -> str:
    """Sessions are kept under a digest of their id: a memory dump shows no usable cookie."""
    return hashlib.sha256(sid.encode()).hexdigest()


# verifies nothing (no password hashes to it); spends the same time as a real account
_DUMMY_HASH: Final = (
    "$argon2id$v=19$m=65536,t=3,p=4$TQ16cj2IK2UERh5+9U5lKw$"
    "CQBd3Q2bLu+uDWId5T0EdTFuwFc+TEcQVOwaRvA1FF0"
)
