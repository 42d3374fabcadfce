"""Ray's Jobs REST API, served by a headless runtime on its dashboard port (8265 by default).

The routes real Ray's ``JobSubmissionClient`` and ``ray job`` CLI use, so they drive this
runtime unchanged: ``GET /api/version``; ``POST /api/jobs/`` (submit), ``GET /api/jobs/``
(list), ``GET`` / ``DELETE /api/jobs/{id}``, ``POST /api/jobs/{id}/stop``,
``GET /api/jobs/{id}/logs``, ``GET /api/jobs/{id}/logs/tail`` (a websocket of text chunks);
``GET`` / ``PUT /api/packages/{protocol}/{name}`` (working_dir and py_modules uploads). Bodies
and statuses are Ray's: JSON on success, a text body with 400 / 404 / 500 on failure.

The server is aiohttp (the HTTP stack Ray's dashboard uses) on an event loop of its own thread
(``ray-adapter-jobs-http``); requests call the :class:`~.jobs.JobManager` (which never blocks
for long: starting a job is its own thread's work). A log tail is fed by the job's reader
thread through ``loop.call_soon_threadsafe`` into a queue: no polling.

Security: the port binds loopback (127.0.0.1) unless ``host`` says otherwise, and a
non-loopback bind needs a token (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names,
or ``~/.ray/auth_token``, as Ray 2.60 finds one; :func:`load_token`): every request must then
carry ``Authorization: Bearer <token>`` (or ``X-Ray-Authorization``), else 401 (none given) or
403 (a wrong one), with a body that says so. With ``RAY_AUTH_MODE=token`` the token is
required on loopback too. Ray 2.60's client sends the header only when token auth is on, so on
loopback by default it works unchanged.
"""
import asyncio
import codecs
import hmac
import ipaddress
import os
import socket
import sys
import threading

from ray_adapter.core.embedded.jobs import JobError

#: The Ray version this API answers as (the client checks it is recent enough).
RAY_VERSION = "2.60.0"
API_VERSION = "3"
#: Bytes of a job's log per websocket message of a tail (clients accept 4 MiB by default).
TAIL_CHUNK = 1 << 20


class TokenRequired(RuntimeError):
    """A non-loopback bind without a token; the message says how to give one."""


def load_token():
    """The token Ray 2.60 would use here: ``RAY_AUTH_TOKEN``, else the file
    ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token``; None when there is none."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    for path in (os.environ.get("RAY_AUTH_TOKEN_PATH"), os.path.expanduser("~/.ray/auth_token")):
        if path:
            try:
                with open(path) as f:
                    token = f.read().strip()
            except OSError:
                continue
            if token:
                return token
    return None


def _peer_uid(request):
    """The OS user of the process at the other end of a loopback TCP connection (Linux: the
    client's socket in ``/proc/net/tcp``), or None when it cannot be told."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    ours = transport.get_extra_info("sockname") if transport is not None else None
    if not peer or not ours:
        return None
    wanted = (_proc_address(peer[0], peer[1]), _proc_address(ours[0], ours[1]))
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if (fields[1], fields[2]) == wanted:
                        return int(fields[7])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return None


def _proc_address(host, port):
    """``host``:``port`` as ``/proc/net/tcp{,6}`` writes it (each 32-bit word in host order)."""
    try:
        raw = socket.inet_pton(socket.AF_INET, host)
    except OSError:
        raw = socket.inet_pton(socket.AF_INET6, host.split("%", 1)[0])
    words = [raw[i:i + 4] for i in range(0, len(raw), 4)]
    order = sys.byteorder
    text = "".join(int.from_bytes(w, "big").to_bytes(4, order).hex().upper() for w in words)
    return f"{text}:{port:04X}"


def _loopback(host):
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class JobServer:
    """The Jobs API of one head on ``host``:``port`` (see the module's notes)."""

    def __init__(self, *, jobs, host, port, routes=None):
        token = load_token()
        required = os.environ.get("RAY_AUTH_MODE", "").lower() == "token" or not _loopback(host)
        if required and token is None:
            raise TokenRequired(
                f"The Jobs API cannot listen on {host}:{port} without a token: a non-loopback "
                "address (or RAY_AUTH_MODE=token) lets other machines and users submit code. "
                "Set RAY_AUTH_TOKEN (or write one to ~/.ray/auth_token) and RAY_AUTH_MODE=token "
                "for the clients, or bind --dashboard-host 127.0.0.1.")
        self._jobs, self._host, self._port = jobs, host, port
        # More GET routes from the layers above (the State API's): path -> handler(match_info,
        # query pairs) -> (status, JSON-ready body); run off the event loop (they take locks).
        self._routes = dict(routes or {})
        self._token = token if required else None
        self._loop = None
        self._runner = None
        self._thread = None
        self.url = f"http://{host}:{port}"

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self):
        """Listen (raises OSError when the port is taken) and serve in a thread."""
        from aiohttp import web

        loop = asyncio.new_event_loop()
        app = web.Application(middlewares=[self._auth], client_max_size=512 * 1024 * 1024)
        app.add_routes([
            web.get("/api/version", self._version),
            web.post("/api/jobs/", self._submit), web.get("/api/jobs/", self._list),
            web.get("/api/jobs/{job_id}", self._info), web.delete("/api/jobs/{job_id}", self._delete),
            web.post("/api/jobs/{job_id}/stop", self._stop),
            web.get("/api/jobs/{job_id}/logs", self._logs),
            web.get("/api/jobs/{job_id}/logs/tail", self._tail),
            web.get("/api/packages/{protocol}/{name}", self._has_package),
            web.put("/api/packages/{protocol}/{name}", self._put_package),
        ])
        app.add_routes([web.get(path, self._served(handler)) for path, handler in self._routes.items()])
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        # SO_REUSEADDR: a port in TIME_WAIT (a head just stopped) binds; a live listener does not.
        site = web.TCPSite(runner, self._host, self._port, reuse_address=True)
        try:
            loop.run_until_complete(site.start())
        except BaseException:
            loop.run_until_complete(runner.cleanup())
            loop.close()
            raise
        self._loop, self._runner = loop, runner
        self._thread = threading.Thread(target=loop.run_forever, name="ray-adapter-jobs-http",
                                        daemon=True)
        self._thread.start()

    def close(self):
        loop = self._loop
        if loop is None:
            return
        self._loop = None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        loop.close()

    # -- requests ----------------------------------------------------------------------------
    async def _auth(self, app, handler):
        from aiohttp import web

        async def check(request):
            if self._token is None and _peer_uid(request) != os.getuid():
                return web.Response(status=403, text=(
                    "Forbidden: this Ray runtime's Jobs API serves its own OS user only (a job "
                    "runs code as that user); start the runtime with a token (RAY_AUTH_TOKEN) "
                    "to let others in."))
            if self._token is not None:
                given = request.headers.get("Authorization") or request.headers.get("X-Ray-Authorization") or ""
                scheme, _, value = given.partition(" ")
                if not given:
                    return web.Response(status=401, text=(
                        "Unauthorized: this Ray runtime requires a token (RAY_AUTH_MODE=token); "
                        "send it as 'Authorization: Bearer <token>'."))
                if scheme.lower() != "bearer" or not hmac.compare_digest(
                        value.strip().encode(errors="replace"), self._token.encode()):
                    return web.Response(status=403, text="Forbidden: the token given is not this Ray runtime's.")
            try:
                return await handler(request)
            except JobError as exc:
                return web.Response(status=exc.status, text=str(exc))
            except (ValueError, TypeError) as exc:
                return web.Response(status=400, text=str(exc))

        return check

    @staticmethod
    def _served(handler):
        from aiohttp import web

        async def serve(request):
            status, body = await asyncio.get_running_loop().run_in_executor(
                None, handler, dict(request.match_info), list(request.query.items()))
            return web.json_response(body, status=status)

        return serve

    @staticmethod
    def _json(data):
        from aiohttp import web

        return web.json_response(data)

    async def _version(self, request):
        return self._json({"version": API_VERSION, "ray_version": RAY_VERSION,
                           "ray_commit": "ray-adapter", "session_name": "ray-adapter"})

    async def _submit(self, request):
        body = await request.json()
        if not isinstance(body, dict):
            raise JobError(400, "the request body must be a JSON object")
        submission_id = self._jobs.submit(body)
        return self._json({"job_id": submission_id, "submission_id": submission_id})

    async def _list(self, request):
        return self._json(self._jobs.list())

    async def _info(self, request):
        return self._json(self._jobs.get(request.match_info["job_id"]))

    async def _delete(self, request):
        return self._json({"deleted": self._jobs.delete(request.match_info["job_id"])})

    async def _stop(self, request):
        return self._json({"stopped": self._jobs.stop(request.match_info["job_id"])})

    async def _logs(self, request):
        return self._json({"logs": self._jobs.logs(request.match_info["job_id"])})

    async def _tail(self, request):
        from aiohttp import web

        job_id = request.match_info["job_id"]
        self._jobs.get(job_id)  # 404 before the upgrade
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        loop = asyncio.get_running_loop()
        grown = asyncio.Event()

        def wake():  # a job thread: the log grew, or the job ended
            loop.call_soon_threadsafe(grown.set)

        # The log is read from its file in pieces of TAIL_CHUNK bytes (an incremental decoder
        # keeps characters split between pieces whole): a reader that does not keep up holds
        # no memory here, and no message exceeds a client's limit.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        offset, last = 0, not self._jobs.follow(job_id, wake)
        try:
            while True:
                grown.clear()
                data = await loop.run_in_executor(None, self._jobs.read_log, job_id, offset, TAIL_CHUNK)
                if data:
                    offset += len(data)
                    text = decoder.decode(data)
                    if text:
                        await ws.send_str(text)
                    continue
                if last:
                    break
                if not self._jobs.running(job_id):
                    last = True  # one more read: what was written before it ended
                    continue
                await grown.wait()
            tail = decoder.decode(b"", final=True)
            if tail:
                await ws.send_str(tail)
        finally:
            self._jobs.unfollow(job_id, wake)
        await ws.close()
        return ws

    async def _has_package(self, request):
        from aiohttp import web

        uri = f"{request.match_info['protocol']}://{request.match_info['name']}"
        if self._jobs.has_package(uri):
            return web.Response(text="")
        return web.Response(status=404, text=f"Package {uri} does not exist")

    async def _put_package(self, request):
        from aiohttp import web

        uri = f"{request.match_info['protocol']}://{request.match_info['name']}"
        data = await request.read()
        await asyncio.get_running_loop().run_in_executor(None, self._jobs.add_package, uri, data)
        return web.Response(text="")
