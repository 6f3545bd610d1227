"""The dashboard's HTTP server: the page (no external resources) and two JSON endpoints."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from twin.dashboard.collect import Collector
from twin.model.draw import positions
from twin.model.fabric import Fabric

PAGE = Path(__file__).resolve().parent / "static" / "index.html"


def topology(fabric: Fabric) -> dict:
    pos = positions(fabric)
    return {
        "lab": fabric.name,
        "nodes": [{"name": n.name, "role": n.role, "rail": n.rail, "group": n.group,
                   "x": pos[n.name][0], "y": pos[n.name][1]} for n in fabric.nodes.values()],
        "links": [{"name": link.name, "a": link.a.node, "b": link.b.node, "kind": link.kind} for link in fabric.links],
    }


class Dashboard:
    """Serves one lab's page on host:port (port 0: any free port) from a background thread."""

    def __init__(self, collector: Collector, fabric: Fabric, host: str = "127.0.0.1", port: int = 0):
        page, topo = PAGE.read_bytes(), json.dumps(topology(fabric)).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path in ("/", "/index.html"):
                    self._send(page, "text/html; charset=utf-8")
                elif self.path == "/api/topology":
                    self._send(topo, "application/json")
                elif self.path == "/api/state":
                    self._send(json.dumps(collector.snapshot()).encode(), "application/json")
                else:
                    self.send_error(404)

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                pass  # one request a second per viewer: not worth a log line

        self.collector = collector
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self.collector.start()
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.collector.stop()
