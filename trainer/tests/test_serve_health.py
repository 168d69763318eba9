"""The front's /health under load (serving/engine_health.py, serving/offload.py): answered while requests' images are
checked and without waiting on a busy engine, on the stand-in engine of test_serve_requests.py."""

import threading

from test_serve_requests import _Engine, chat, front  # noqa: F401 (front: the fixture)


def test_health_is_answered_while_a_request_s_images_are_checked(front, monkeypatch):
    """issue 53, item 3: the front decoded images on its event loop (four requests of 8 PNGs of 4096x4096 held
    /health 5.8 s, and a probe restarts a server that does not answer). Here one request's check takes 3 s, as a
    large decode does, holding the thread it runs in: /health is answered meanwhile, in far less."""
    import time

    from vlmgrpo.serving import app as front_module

    checked = front_module.check_chat_request

    def slow(*args):
        time.sleep(3)  # as decoding does: no await in it
        return checked(*args)

    monkeypatch.setattr(front_module, "check_chat_request", slow)
    client, seen, _ = front
    posting = threading.Thread(target=lambda: client.post("/v1/chat/completions", json=chat()))
    posting.start()
    time.sleep(0.5)
    started = time.monotonic()
    assert client.get("/health").status_code == 200
    waited = time.monotonic() - started
    posting.join()
    assert waited < 1.5 and len(seen) == 1, waited


def test_health_answers_from_the_engine_s_last_answer_without_waiting_on_it(front, monkeypatch):
    """Bench section 17: asked per probe, /health waited on an engine busy with a valid request (2.73 s). It answers
    from the background poll now: an engine whose /health hangs is still healthy until its last answer is
    STALE_S old, then 503; a refused connection is 503 at once."""
    import time

    from vlmgrpo.serving import engine_health

    client, _, _ = front
    assert client.get("/health").status_code == 200
    delay = threading.Event()
    answered = _Engine.do_GET

    def hanging(self):
        delay.wait(30)
        answered(self)

    monkeypatch.setattr(_Engine, "do_GET", hanging)
    started = time.monotonic()
    assert client.get("/health").status_code == 200 and time.monotonic() - started < 0.5
    monkeypatch.setattr(engine_health, "STALE_S", 0.5)
    time.sleep(0.6)
    assert client.get("/health").status_code == 503
    delay.set()
