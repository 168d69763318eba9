"""The engine's health as the front last saw it: asked in the background, so that the front's /health answers at
once. Asked per probe, it waited on an engine busy with a valid request of 8 large images: 2.73 s at worst beside the
abusive clients of bench/RESULTS.md section 17, where a liveness probe gives up after 1 s and restarts the server."""

from __future__ import annotations

import asyncio
import time

POLL_S = 1.0  # how often the engine's own /health is asked
STALE_S = 5.0  # an engine whose last answer is older (its /health hangs) is not answering; a refused connection is so
# at once


class EngineHealth:
    def __init__(self):
        self.answered_at: float | None = None  # time.monotonic() of the engine's last 200

    @property
    def healthy(self) -> bool:
        return self.answered_at is not None and time.monotonic() - self.answered_at <= STALE_S

    def gone(self) -> None:
        """The engine refused a connection (it died, and is being started again): not answering, from now."""
        self.answered_at = None

    async def ask(self, client, http_error) -> None:
        try:
            answer = await client.get("/health", timeout=STALE_S)
        except http_error:
            self.gone()
            return
        if answer.status_code == 200:
            self.answered_at = time.monotonic()
        else:
            self.gone()

    async def watch(self, client, http_error) -> None:
        """Ask every POLL_S until cancelled (the front's lifespan)."""
        while True:
            await asyncio.sleep(POLL_S)
            await self.ask(client, http_error)
