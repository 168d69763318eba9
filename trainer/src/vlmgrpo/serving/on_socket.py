"""`transformers serve` listening on a Unix socket: `python -m vlmgrpo.serving.on_socket SOCKET serve ARGS...`.

transformers serve listens on TCP only (its --host and --port reach `uvicorn.Config(app, host=, port=)`), and on
loopback every local user, and every container of a pod (they share its network namespace), reached the engine past
the front's checks and key: a file oracle (issue 53). uvicorn binds a socket path instead when its Config is given
`uds=`; here every Config made in this process is, whatever host and port it is given. The socket's directory is
what keeps others out (serve.py makes it private): uvicorn makes the socket itself writable by anyone.
"""

from __future__ import annotations

import sys


def main(arguments: list[str]) -> None:
    import uvicorn

    path, *transformers_arguments = arguments

    class OnSocket(uvicorn.Config):
        def __init__(self, app, *args, **kwargs):
            kwargs.pop("host", None)
            kwargs.pop("port", None)
            super().__init__(app, *args, uds=path, **kwargs)

    uvicorn.Config = OnSocket
    from transformers.cli.transformers import main as transformers_main

    sys.argv = ["transformers", *transformers_arguments]
    transformers_main()


if __name__ == "__main__":
    main(sys.argv[1:])
