"""A loopback HTTP server for the tests of checkpoints named by URL.

:class:`CheckpointServer` serves the files of one folder on 127.0.0.1 (a
free port) from a thread of the test process; it stops when the test is
done, and by itself after ``lifetime`` seconds in any case. A file whose
name starts with ``cut-`` is announced whole (``Content-Length``) and sent
half; every request is counted per path.
"""
import http.server
import os
import os.path as osp
import threading
from collections import Counter
from typing import Optional


class _Handler(http.server.SimpleHTTPRequestHandler):

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        server = self.server
        name = self.path.lstrip('/').split('?')[0]
        server.requests[name] += 1
        if not name.startswith('cut-'):
            return super().do_GET()
        with open(osp.join(server.folder, name), 'rb') as f:
            data = f.read()
        self.send_response(200)
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2])
        self.wfile.flush()
        self.close_connection = True


class CheckpointServer:
    """Serve ``folder`` on loopback.

    Args:
        folder (str): The files to serve.
        lifetime (float): Seconds after which the server stops by itself.
            Defaults to 600.

    Example:
        >>> with CheckpointServer(folder) as server:  # doctest: +SKIP
        ...     server.url('good.pth')
    """

    def __init__(self, folder: str, lifetime: float = 600.):
        folder = os.fspath(folder)

        def handler(*args, **kwargs):
            return _Handler(*args, directory=folder, **kwargs)

        self._httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      handler)
        self._httpd.daemon_threads = True
        self._httpd.folder = folder
        self._httpd.requests = Counter()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs=dict(poll_interval=0.05),
            daemon=True)
        self._timer: Optional[threading.Timer] = threading.Timer(
            lifetime, self.stop)
        self._timer.daemon = True
        self._stopped = False

    @property
    def requests(self) -> Counter:
        """Requests per file name."""
        return self._httpd.requests

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, name: str) -> str:
        return f'http://127.0.0.1:{self.port}/{name}'

    def start(self) -> 'CheckpointServer':
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> 'CheckpointServer':
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def refused_url(name: str = 'good.pth') -> str:
    """A loopback URL where nothing listens (the connection is refused)."""
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    return f'http://127.0.0.1:{port}/{name}'
