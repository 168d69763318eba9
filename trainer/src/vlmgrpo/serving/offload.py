"""Where the front's CPU work runs: the requests' checks (decoding images, parsing, counting tokens) in a few
threads of their own, off the event loop, and the loop given the GIL often.

Beside the abusive clients of bench/RESULTS.md section 17, /health took 2.73 s while it asked the busy engine, then
0.52 s answering from the front alone: every thread holding the GIL delays the event loop's next turn by up to the
switch interval (5 ms by default), and asyncio's default pool runs cores + 4 of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import sys

CHECK_THREADS = 2  # checks at once: a large image's decode does not hold every other request's check
SWITCH_S = 0.001  # the front process's GIL switch interval: the loop waits at most this for a busy check thread

_checks = concurrent.futures.ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="vlmgrpo-check")


async def off_the_loop(function, *args):
    """function(*args) in one of the check threads."""
    return await asyncio.get_running_loop().run_in_executor(_checks, function, *args)


def loop_first() -> None:
    """In the server's process, before it serves: the event loop gets the GIL back within SWITCH_S, and what the
    process loaded (the tokenizer, the processor, the libraries) leaves the garbage collector's walks: a full
    collection, which stops every thread, walked it all while requests made garbage."""
    sys.setswitchinterval(SWITCH_S)
    gc.collect()
    gc.freeze()
