"""tests/mock_hub.py — a local stand-in for the Hugging Face hub, for the pull/stream tests.

Serves repositories from memory on 127.0.0.1 with the hub's URL layout and headers:

  GET /api/models/{repo}/revision/{rev}[?blobs=true]
        {"id", "sha", "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256", "size",
        "pointerSize"}}]}  (size/blobId/lfs only with blobs=true, as the hub does)
  GET /api/models/{repo}/tree/{rev}?recursive=true
        [{"type": "file", "path", "size", "oid", "lfs": {"oid", "size", "pointerSize"}}]
  GET|HEAD /{repo}/resolve/{rev}/{path}
        small (git) files: 200 with ETag "<git blob sha1>" and X-Repo-Commit;
        LFS files: 302 to a storage URL on another host name (localhost instead of
        127.0.0.1, like the hub's CDN) with X-Repo-Commit, X-Linked-Etag "<sha256>",
        X-Linked-Size and ETag; the storage URL serves the bytes with Range support (206,
        Content-Range, 416) and must not receive the Authorization header.
  Errors carry X-Error-Code / X-Error-Message like the hub (RepoNotFound, RevisionNotFound,
  EntryNotFound, GatedRepo).

Fault injection (MockHub.faults, keyed by repo file path, reset per scenario):
  close_after[path] = [n, ...]  per GET in order: send the headers, n body bytes, then close
  stall_after[path] = [n, ...]  per GET: send n body bytes, then hang (until stop) and close
  flip[path] = offset           serve that byte XOR 0x01 in every response covering it
  status[key] = [code, ...]     per request: answer `code` (key = path, or "api" for the API)
  ignore_range = {path, ...}    answer 200 with the whole file even when a Range is asked
  portal[path] = [n, ...]       per GET: a complete 200 HTML page instead of the file; n == 1
                                a short page, n > 1 a page of n bytes (larger than the file)
Listing overrides (Repo.blob_ids[path]): the blobId listed for path, or None to list none.
Log: MockHub.log has one dict per request (method, kind, path, range, auth, host); served[path]
counts body bytes sent. on_fetch(path, range) is called before each ranged body is sent.

FileRepo serves a folder from disk without reading it whole (ranges are pread), for folders
too large for memory such as the header-only Kimi K3 (96 sparse shards, 1.56 TB apparent):
files above `hash_limit` are listed with a stand-in lfs.sha256 (a full download of such a
file would fail its hash check; tests of them read headers only), and a single read larger
than `max_read` is refused (the connection is closed), so a test that asks for the sparse
bytes by mistake fails instead of exhausting memory.

Run standalone to serve a folder:  python3 mock_hub.py ORG/NAME DIR  (prints the endpoint)
"""
import hashlib
import http.server
import json
import os
import re
import socket
import threading
import urllib.parse

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, files, commit=None, token=None, sizes=None):
        self.id = repo_id
        self.files = dict(files)  # path -> bytes
        self.commit = commit or hashlib.sha1(repr(sorted(
            (p, hashlib.sha256(b).hexdigest()) for p, b in self.files.items())).encode()).hexdigest()
        self.refs = {"main": self.commit}
        self.token = token          # required bearer token (gated/private repo) or None
        self.sizes = sizes or {}    # listed size overrides (e.g. to test the disk check)
        self.blob_ids = {}          # listed blobId overrides (None: no blobId listed)

    def is_lfs(self, path):
        return path.endswith(LFS_SUFFIXES) or len(self.files[path]) > 10 * 1024 * 1024

    def meta(self, path):
        b = self.files[path]
        return {"size": self.sizes.get(path, len(b)), "blob": git_blob_sha1(b),
                "sha256": hashlib.sha256(b).hexdigest(), "lfs": self.is_lfs(path)}


class FileBytes:
    """A file's bytes, read on demand: len() and slicing (pread) like bytes."""

    def __init__(self, path, max_read):
        self.path = path
        self.size = os.path.getsize(path)
        self.max_read = max_read

    def __len__(self):
        return self.size

    def __getitem__(self, sl):
        start, stop, _ = sl.indices(self.size)
        if stop - start > self.max_read:
            raise ValueError("%s: refusing to read %d bytes at %d" % (self.path, stop - start, start))
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), max(0, stop - start), start)


class FileRepo(Repo):
    """A repository served from a folder on disk (see the module comment)."""

    def __init__(self, repo_id, folder, hash_limit=256 << 20, max_read=256 << 20, token=None):
        files = {}
        for root, _, names in os.walk(folder):
            for n in names:
                p = os.path.join(root, n)
                files[os.path.relpath(p, folder)] = FileBytes(p, max_read)
        self.hash_limit = hash_limit
        self._meta = {}
        self.id = repo_id
        self.files = files
        self.token = token
        self.sizes = {}
        self.commit = hashlib.sha1(repr(sorted((p, len(b)) for p, b in files.items())).encode()).hexdigest()
        self.refs = {"main": self.commit}

    def meta(self, path):
        m = self._meta.get(path)
        if m is None:
            f = self.files[path]
            if f.size <= self.hash_limit:
                with open(f.path, "rb") as fh:
                    data = fh.read()
                m = {"size": f.size, "blob": git_blob_sha1(data),
                     "sha256": hashlib.sha256(data).hexdigest(), "lfs": self.is_lfs(path)}
            else:  # a stand-in: too large (or sparse) to hash
                tag = ("%s:%d" % (path, f.size)).encode()
                m = {"size": f.size, "blob": hashlib.sha1(b"pointer " + tag).hexdigest(),
                     "sha256": hashlib.sha256(b"unhashed " + tag).hexdigest(), "lfs": True}
            self._meta[path] = m
        return m


class MockHub:
    def __init__(self):
        self.repos = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.reset()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                # no Nagle: a response's body leaves without waiting for the ACK of its
                # header (which the client may delay by up to 40 ms)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self):
                hub._handle(self, head=False)

            def do_HEAD(self):
                hub._handle(self, head=True)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # clients that hang up mid-body are part of the tests

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reset(self):
        with self.lock:
            self.faults = {"close_after": {}, "stall_after": {}, "flip": {}, "status": {},
                           "ignore_range": set(), "portal": {}}
            self.log = []
            self.served = {}
            self.on_fetch = None

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    def add_repo(self, repo):
        self.repos[repo.id] = repo
        return repo

    # ---------------------------------------------------------------- helpers
    def requests(self, kind=None, path=None, method="GET"):
        with self.lock:
            return [r for r in self.log if (kind is None or r["kind"] == kind) and
                    (path is None or r["path"] == path) and (method is None or r["method"] == method)]

    def _pop(self, table, key):
        with self.lock:
            lst = self.faults[table].get(key)
            if lst:
                return lst.pop(0)
            return None

    def _send(self, h, code, headers, body=b"", head=False):
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head and body:
            h.wfile.write(body)

    def _error(self, h, code, error_code, msg, head=False, extra=None):
        body = json.dumps({"error": msg}).encode()
        hd = {"Content-Type": "application/json", "X-Error-Code": error_code,
              "X-Error-Message": msg}
        hd.update(extra or {})
        self._send(h, code, hd, body, head)

    def _auth_ok(self, h, repo):
        if repo.token is None:
            return True
        return h.headers.get("Authorization") == "Bearer " + repo.token

    def _find_repo(self, parts):
        for n in (2, 1):
            rid = "/".join(parts[:n])
            if rid in self.repos:
                return self.repos[rid], parts[n:]
        return None, parts

    # ---------------------------------------------------------------- dispatch
    def _handle(self, h, head):
        url = urllib.parse.urlsplit(h.path)
        raw = url.path
        parts = [urllib.parse.unquote(p) for p in raw.split("/")[1:]]
        entry = {"method": h.command, "path": None, "kind": None, "range": h.headers.get("Range"),
                 "auth": h.headers.get("Authorization"), "host": h.headers.get("Host"),
                 "url": h.path}
        with self.lock:
            self.log.append(entry)
        try:
            if parts[:2] == ["api", "models"]:
                entry["kind"] = "api"
                return self._api(h, parts[2:], url.query, head)
            if parts and parts[0] == "lfs-storage":
                entry["kind"] = "storage"
                return self._storage(h, parts[1:], entry, head)
            entry["kind"] = "resolve"
            return self._resolve(h, raw, entry, head)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _api(self, h, parts, query, head):
        code = self._pop("status", "api")
        if code:
            return self._error(h, code, "ServerError", "injected %d" % code, head)
        repo, rest = self._find_repo(parts)
        if repo is None or len(rest) < 2 or rest[0] not in ("revision", "tree"):
            return self._error(h, 401, "RepoNotFound", "Repository Not Found for url: " + h.path, head)
        if not self._auth_ok(h, repo):
            return self._error(h, 401, "GatedRepo", "Access to model %s is restricted. You must "
                               "have access to it and be authenticated to access it." % repo.id, head)
        rev = rest[1]
        commit = repo.refs.get(rev, rev if rev == repo.commit else None)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", "Invalid rev id: " + rev, head)
        q = urllib.parse.parse_qs(query)
        if rest[0] == "revision":
            blobs = q.get("blobs", ["false"])[0].lower() == "true"
            sib = []
            for p in sorted(repo.files):
                m = repo.meta(p)
                s = {"rfilename": p}
                if blobs:
                    s["size"] = m["size"]
                    s["blobId"] = getattr(repo, "blob_ids", {}).get(p, m["blob"])
                    if s["blobId"] is None:
                        del s["blobId"]
                    if m["lfs"]:
                        s["lfs"] = {"sha256": m["sha256"], "size": m["size"], "pointerSize": 134}
                sib.append(s)
            body = json.dumps({"_id": "x", "id": repo.id, "modelId": repo.id, "sha": commit,
                               "private": repo.token is not None, "siblings": sib}).encode()
        else:
            out = []
            for p in sorted(repo.files):
                m = repo.meta(p)
                e = {"type": "file", "oid": m["blob"], "size": m["size"], "path": p}
                if m["lfs"]:
                    e["lfs"] = {"oid": m["sha256"], "size": m["size"], "pointerSize": 134}
                out.append(e)
            body = json.dumps(out).encode()
        self._send(h, 200, {"Content-Type": "application/json"}, body, head)

    def _resolve(self, h, raw, entry, head):
        m = re.match(r"^/(.+?)/resolve/([^/]+)/(.+)$", raw)
        if not m:
            return self._error(h, 404, "EntryNotFound", "no route", head)
        repo, rest = self._find_repo([urllib.parse.unquote(x) for x in m.group(1).split("/")])
        if repo is None or rest:
            return self._error(h, 401, "RepoNotFound", "Repository Not Found", head)
        rev = urllib.parse.unquote(m.group(2))
        path = urllib.parse.unquote(m.group(3))
        entry["path"] = path
        if not self._auth_ok(h, repo):
            return self._error(h, 401, "GatedRepo", "Access to model %s is restricted." % repo.id, head)
        commit = repo.refs.get(rev, rev if rev == repo.commit else None)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", "Invalid rev id: " + rev, head)
        code = self._pop("status", path)
        if code:
            return self._error(h, code, "ServerError" if code >= 500 else "EntryNotFound",
                               "injected %d" % code, head, {"X-Repo-Commit": commit})
        if path not in repo.files:
            return self._error(h, 404, "EntryNotFound", "%s does not exist on \"%s\"" % (path, rev),
                               head, {"X-Repo-Commit": commit})
        meta = repo.meta(path)
        if meta["lfs"]:
            loc = "http://localhost:%d/lfs-storage/%s/%s?X-Amz-Expires=3600" % (
                self.port, urllib.parse.quote(repo.id, safe=""), meta["sha256"])
            return self._send(h, 302, {"Location": loc, "X-Repo-Commit": commit,
                                       "X-Linked-Etag": '"%s"' % meta["sha256"],
                                       "X-Linked-Size": str(meta["size"]),
                                       "ETag": '"%s"' % meta["blob"], "Content-Type": "text/plain"},
                              b"Found", head)
        self._body(h, repo, path, {"X-Repo-Commit": commit, "ETag": '"%s"' % meta["blob"]}, head)

    def _storage(self, h, parts, entry, head):
        if h.headers.get("Authorization"):
            entry["auth_leak"] = True
        if len(parts) != 2 or parts[0] not in self.repos:
            return self._send(h, 403, {}, b"AccessDenied", head)
        repo = self.repos[parts[0]]
        for p in repo.files:
            if repo.meta(p)["sha256"] == parts[1]:
                entry["path"] = p
                return self._body(h, repo, p, {"ETag": '"%s"' % parts[1]}, head)
        return self._send(h, 404, {}, b"NoSuchKey", head)

    def _body(self, h, repo, path, headers, head):
        data = repo.files[path]
        size = len(data)
        rng = h.headers.get("Range")
        start, end, code = 0, size, 200
        if rng and path not in self.faults["ignore_range"]:
            m = re.match(r"^bytes=(\d+)-(\d*)$", rng.strip())
            if not m:
                return self._send(h, 416, {"Content-Range": "bytes */%d" % size}, b"", head)
            start = int(m.group(1))
            end = int(m.group(2)) + 1 if m.group(2) else size
            end = min(end, size)
            if start >= size or start >= end:
                return self._send(h, 416, {"Content-Range": "bytes */%d" % size}, b"", head)
            code = 206
        hd = dict(headers)
        hd.update({"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                   "Content-Length": str(end - start)})
        if code == 206:
            hd["Content-Range"] = "bytes %d-%d/%d" % (start, end - 1, size)
        if head:
            return self._send(h, code, hd, b"", True)
        portal = self._pop("portal", path)
        if portal is not None:
            # a captive portal / proxy error page: a complete 200 that is not the file
            page = b"<html><body>Please log in to the network</body></html>"
            if portal > 1:
                page = page[:-14] + b" " * (portal - len(page)) + page[-14:]
            return self._send(h, 200, {"Content-Type": "text/html; charset=utf-8",
                                       "Content-Length": str(len(page))}, page, head)
        if self.on_fetch is not None:
            self.on_fetch(path, (start, end))
        body = bytearray(data[start:end])
        flip = self.faults["flip"].get(path)
        if flip is not None and start <= flip < end:
            body[flip - start] ^= 0x01
        cut = self._pop("close_after", path)
        stall = self._pop("stall_after", path)
        h.send_response(code)
        for k, v in hd.items():
            h.send_header(k, v)
        h.end_headers()
        n = len(body)
        if cut is not None:
            n = min(n, cut)
        if stall is not None:
            n = min(n, stall)
        h.wfile.write(bytes(body[:n]))
        h.wfile.flush()
        with self.lock:
            self.served[path] = self.served.get(path, 0) + n
        if stall is not None:
            self.stop.wait(60)
        if cut is not None or stall is not None:
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def repo_from_dir(repo_id, folder):
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            files[os.path.relpath(p, folder)] = open(p, "rb").read()
    return Repo(repo_id, files)


if __name__ == "__main__":
    import sys
    hub = MockHub()
    hub.add_repo(FileRepo(sys.argv[1], sys.argv[2]))
    print(hub.endpoint, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        hub.close()
