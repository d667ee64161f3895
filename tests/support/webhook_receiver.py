"""A real webhook receiver on 127.0.0.1: records every POST, verifies its Standard Webhooks
signature with the ``standardwebhooks`` library, answers with scripted statuses, and can hold
a request (``hold``) until released, so a test can kill the sender mid-delivery."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Received:
    headers: dict[str, str]
    body: Any
    verified: bool


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)  # answered in order, then 200
    received: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    hold: threading.Event | None = None  # when set up, each request waits for it

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    body = Webhook(SECRET).verify(data, headers)
                    verified = True
                except Exception:
                    body, verified = json.loads(data), False
                receiver.received.append(Received(headers, body, verified))
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/ctrlrun"

    def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()
