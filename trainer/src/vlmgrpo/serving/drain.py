"""What SIGTERM does to the chat requests in flight: each is answered, or refused in OpenAI's error shape, and the
log says which, one line each and a count.

uvicorn's own graceful shutdown closes the listening socket at once (a request on its way gets a refused connection)
and, after timeout_graceful_shutdown, cancels whatever still runs: those clients got a closed connection (a bare
500 from their library) while our log said every request was answered. Here, once the signal comes (serve.py's
server calls run() before uvicorn's shutdown): the listener stays open and each new chat request is answered 503 at
once; the requests in flight get the grace to finish; those still running when it ends are refused (a 503, or an
error event in a stream already under way: the openai client raises either), their engine requests cancelled; only
then does uvicorn's shutdown close what is left, the engine stopped after it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

from vlmgrpo.serving.requests import CHAT_PATH, RequestProblem

log = logging.getLogger("vlmgrpo")

# Seconds the requests in flight at SIGTERM get to finish. 25: Kubernetes kills a pod 30 s after SIGTERM (its default
# terminationGracePeriodSeconds), and the refusals and stopping the engine need the rest; an answer of a few hundred
# tokens takes seconds on a GPU.
SHUTDOWN_GRACE_S = 25.0
# After the grace: time for the refusals to be written before uvicorn cuts what is still running (a request still
# reading a slow client's body, say)
REFUSE_S = 3.0
SHUTTING_DOWN = "server_shutting_down"
TICKET = "vlmgrpo.ticket"  # the scope key a chat request's Ticket is under


@dataclass(eq=False)
class Ticket:
    """One chat request, from its arrival until the last byte of its answer is sent (or it ends otherwise)."""
    number: int
    started: float
    status: Optional[int] = None  # the answer's status, once its head is sent
    complete: bool = False  # the whole answer sent
    refused: bool = False  # refused because the grace ended
    gone: bool = False  # the client hung up first
    outcome: Optional[str] = None  # answered, refused, hung up, cut: set when it ends, for those in flight at SIGTERM

    def ended(self) -> str:
        if self.complete and self.refused:
            return "refused"
        if self.gone:  # what was sent after (a 499) reached nobody
            return "hung up"
        return "answered" if self.complete else "cut"


class Tracked:
    """The ASGI layer that gives each chat request to Drain.track. Plain ASGI, as app.py's Gate: Starlette's
    BaseHTTPMiddleware would hide a client's hang-up from the route."""

    def __init__(self, app, drain: "Drain"):
        self.app, self.drain = app, drain

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != CHAT_PATH:
            return await self.app(scope, receive, send)
        await self.drain.track(self.app, scope, receive, send)


class Drain:
    def __init__(self, grace_s: float = SHUTDOWN_GRACE_S):
        self.grace_s = grace_s
        self.draining = False
        self.open: set[Ticket] = set()
        self.watched: list[Ticket] = []  # those in flight when the signal came
        self.new_refused = 0
        self._numbers = itertools.count(1)
        self._over: Optional[asyncio.Event] = None
        self._signalled = 0.0

    @property
    def over(self) -> asyncio.Event:
        """Set when the grace ends: each request still running is refused (made in the server's own loop)."""
        if self._over is None:
            self._over = asyncio.Event()
        return self._over

    def refusal(self, ticket: Optional[Ticket]) -> RequestProblem:
        if ticket is not None:
            ticket.refused = True
        return RequestProblem(503, f"the server is shutting down and this request did not finish within its grace of "
                                   f"{self.grace_s:g} s; send it again (to another replica)", code=SHUTTING_DOWN)

    async def track(self, inner, scope, receive, send) -> None:
        """A chat request through the app: its ticket (what became of it is read from what is sent), or 503 once the
        signal came."""
        if self.draining:
            return await self._refuse_new(scope, receive, send)
        ticket = Ticket(next(self._numbers), time.monotonic())
        scope[TICKET] = ticket
        self.open.add(ticket)

        async def watched_send(message):
            if message["type"] == "http.response.start":
                ticket.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ticket.complete = True
            await send(message)

        async def watched_receive():
            message = await receive()
            if message["type"] == "http.disconnect" and not ticket.complete:
                ticket.gone = True
            return message

        try:
            await inner(scope, watched_receive, watched_send)
        finally:
            self._close(ticket)

    async def _refuse_new(self, scope, receive, send) -> None:
        from fastapi.responses import JSONResponse

        if not self.new_refused:
            log.info("shutdown: a new request came and was answered 503 (as each one after it is)")
        self.new_refused += 1
        problem = RequestProblem(503, "the server is shutting down and takes no new requests; send it again (to "
                                      "another replica)", code=SHUTTING_DOWN)
        # Connection: close, so a keep-alive client opens a new connection (to a replica still serving)
        await JSONResponse(problem.body(), status_code=503, headers={"connection": "close"})(scope, receive, send)

    def _close(self, ticket: Ticket) -> None:
        self.open.discard(ticket)
        if ticket in self.watched and ticket.outcome is None:
            ticket.outcome = ticket.ended()
            self._say(ticket)

    def _say(self, ticket: Ticket) -> None:
        how = {"answered": f"answered {ticket.status}",
               # a stream's head (200) went before the grace ended: its refusal is the stream's last event
               "refused": "refused 503" if ticket.status == 503 else "refused by an error event ending its stream",
               "hung up": "not answered: the client hung up first",
               "cut": "cut without a whole answer"}[ticket.outcome]
        log.info("shutdown: request %d %s, %.1f s after the signal", ticket.number, how,
                 time.monotonic() - self._signalled)

    async def run(self, forced: Callable[[], bool] = lambda: False) -> None:
        """From the signal until every request that was in flight ended, the grace at most (and REFUSE_S more for
        the refusals): then one line with the counts. forced(): a second Ctrl-C, after which nothing is waited for."""
        self.draining = True
        self._signalled = time.monotonic()
        self.watched = sorted(self.open, key=lambda ticket: ticket.number)
        log.info("shutdown: %d requests in flight get up to %g s to finish; new requests are answered 503",
                 len(self.watched), self.grace_s)
        await self._until(self._signalled + self.grace_s, forced)
        if self._still_open():
            log.info("shutdown: the grace of %g s ended with %d requests unfinished: each is refused",
                     self.grace_s, len(self._still_open()))
            self.over.set()
            await self._until(time.monotonic() + REFUSE_S, forced)
        for ticket in self._still_open():  # uvicorn's shutdown cancels them next
            ticket.outcome = "cut"
            self._say(ticket)
        log.info("shutdown: %s", self.summary())

    def summary(self) -> str:
        counts = {outcome: sum(t.outcome == outcome for t in self.watched) for outcome in ("answered", "refused",
                                                                                         "hung up", "cut")}
        said = f"{len(self.watched)} in flight, {counts['answered']} answered, {counts['refused']} refused"
        said += "".join(f", {counts[outcome]} {outcome}" for outcome in ("hung up", "cut") if counts[outcome])
        return said + (f"; new requests answered 503: {self.new_refused}" if self.new_refused else "")

    def _still_open(self) -> list[Ticket]:
        return [ticket for ticket in self.watched if ticket.outcome is None]

    async def _until(self, deadline: float, forced: Callable[[], bool]) -> None:
        while self._still_open() and time.monotonic() < deadline and not forced():
            await asyncio.sleep(0.05)
