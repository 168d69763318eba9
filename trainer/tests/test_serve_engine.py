"""`vlmgrpo serve`'s engine and its command line without a model served: which engine, the command it is started
with (on its private socket, fetching nothing, opening no file), and the flags refused before anything starts."""

import subprocess
import sys

import pytest

from conftest import ENV
from vlmgrpo.errors import ConfigError
from vlmgrpo.serving.serve import ServeSettings, choose_engine, engine_command, engine_model_id


def test_engine_is_vllm_only_with_vllm_and_a_gpu():
    assert choose_engine("auto", vllm_installed=True, gpu=True) == "vllm"
    assert choose_engine("auto", vllm_installed=True, gpu=False) == "transformers"
    assert choose_engine("auto", vllm_installed=False, gpu=True) == "transformers"
    with pytest.raises(ConfigError, match="vLLM is not installed"):
        choose_engine("vllm", vllm_installed=False, gpu=True)
    with pytest.raises(ConfigError, match="no GPU"):
        choose_engine("vllm", vllm_installed=True, gpu=False)


SOCKET = "/tmp/vlmgrpo-engine-x/engine.sock"


def test_engine_commands_listen_on_their_socket_only_with_the_served_name():
    settings = ServeSettings("/out/merged", "rec-model", port=8000, engine_args=["--max-model-len", "4096"])
    vllm = engine_command(settings, "vllm", SOCKET)
    assert vllm[0].endswith("vllm") and vllm[1:3] == ["serve", "/out/merged"]
    assert vllm[vllm.index("--uds") + 1] == SOCKET and "--host" not in vllm and "--port" not in vllm
    assert vllm[vllm.index("--served-model-name") + 1] == "rec-model" and vllm[-2:] == ["--max-model-len", "4096"]
    transformers = engine_command(settings, "transformers", SOCKET)
    assert transformers[1:6] == ["-m", "vlmgrpo.serving.on_socket", SOCKET, "serve", "/out/merged"]
    assert "--host" not in transformers and "--port" not in transformers
    assert transformers[transformers.index("--attn-implementation") + 1] == "sdpa"  # chosen as `train` chooses: no GPU
    chosen = ServeSettings("/m", "m", engine_args=["--attn-implementation", "eager"])
    assert engine_command(chosen, "transformers", SOCKET).count("--attn-implementation") == 1
    assert engine_model_id(settings, "vllm") == "rec-model" and engine_model_id(settings, "transformers") == "/out/merged"


def test_vllm_fetches_no_url_and_opens_no_file():
    """Every image reaches the engine inline: vLLM's own media allow-list names a host that never resolves (an empty
    one lets it fetch any URL), and its media flags are not passed through."""
    vllm = engine_command(ServeSettings("/out/merged", "rec-model"), "vllm", SOCKET)
    assert vllm[vllm.index("--allowed-media-domains") + 1].endswith(".invalid")
    assert "--allowed-local-media-path" not in vllm
    for extra in (["--allowed-local-media-path", "/"], ["--allowed-media-domains=127.0.0.1"],
                  ["--allowed_local_media_path", "/"], ["--allowed_media_domains=127.0.0.1"]):  # vLLM reads _ as -
        with pytest.raises(ConfigError, match=f"{extra[0].split('=')[0]} is not passed to the engine"):
            engine_command(ServeSettings("/out/merged", "rec-model", engine_args=extra), "vllm", SOCKET)


@pytest.mark.parametrize("engine", ["vllm", "transformers"])
@pytest.mark.parametrize("extra", [["--host", "0.0.0.0"], ["--port=9000"], ["--uds", "/tmp/s"], ["--host=::"]])
def test_the_engine_is_told_no_other_place_to_listen(engine, extra):
    with pytest.raises(ConfigError, match=f"{extra[0].split('=')[0]} is not passed to the engine: it listens on a "
                                          "private socket"):
        engine_command(ServeSettings("/out/merged", "rec-model", engine_args=extra), engine, SOCKET)


@pytest.mark.parametrize("flag", ["--shutdown-grace", "--read-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_float_flag_is_finite(tiny, flag, value):
    """issue 53, item 4: a NaN passed the flag's least value, and an infinite grace or timeout never ends."""
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", "serve", "--model", tiny["model"], flag, value],
                            env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and f"Invalid value for '{flag}': '{value}' is not a finite number" in \
        result.stderr and "Traceback" not in result.stderr


def test_a_busy_port_is_one_line_before_the_engine_starts(tiny):
    import socket
    import time

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "vlmgrpo", "serve", "--model", tiny["model"], "--port",
                                 str(port)], env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "serving " not in result.stderr and time.monotonic() - started < 60  # no engine was started
