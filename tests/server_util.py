"""Helpers shared by the `deltafin serve` tests: the test model, starting and stopping a
server on a free port, reference outputs from `deltafin run`, raw HTTP requests, and SSE
parsing. Standard library only (run with Debian's /usr/bin/python3).

Also a command: `server_util.py make-model TOKENIZER_DIR OUT_DIR` builds the test model: a
random `tiny-moe-tied` checkpoint with Qwen3's vocabulary size (tests/reference/
make_checkpoint.py) plus Qwen3's real tokenizer.json / tokenizer_config.json (chat template
included), and OUT_DIR-draft: a random dense qwen3 of the same vocabulary (a draft whose
tokens the target mostly rejects).
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def finish():
    if failures:
        print(f"{len(failures)} check(s) failed:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("all checks passed")


def make_model(tokdir, out):
    draft = out + "-draft"
    if not os.path.exists(os.path.join(draft, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "reference", "make_checkpoint.py"),
                        "--preset", "tiny-moe-tied", "--dense", "--vocab", "151936", "--seed", "77",
                        "--out", draft], check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        tmp = out + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(HERE, "reference", "make_checkpoint.py"),
                        "--preset", "tiny-moe-tied", "--vocab", "151936", "--out", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokdir, fn), tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)


def tiny_tiktoken_model(work, name, tokdir, k3=False):
    """WORK/NAME: a random tiny-moe-tied checkpoint (k3: a tiny Kimi K3, kimi_k3_ckpt.py's
    tiny-k3) of the 1141-id tiny tiktoken vocabulary (made once) with tokdir's tiktoken.model
    and tokenizer_config.json copied in. Returns the folder."""
    model = os.path.join(work, name)
    if not os.path.exists(os.path.join(model, "config.json")):
        cmd = (["kimi_k3_ckpt.py", "--preset", "tiny-k3"] if k3 else
               ["make_checkpoint.py", "--preset", "tiny-moe-tied"])
        subprocess.run([sys.executable, os.path.join(HERE, "reference", cmd[0]), *cmd[1:],
                        "--vocab", "1141", "--out", model],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for fn in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), model)
    return model


class Server:
    """`deltafin serve --port 0 ...` in the background; .port once it listens."""

    def __init__(self, exe, model, *args, env=None):
        self.log = []
        e = dict(os.environ)
        e.pop("DELTAFIN_API_KEY", None)
        if env:
            e.update(env)
        self.p = subprocess.Popen([exe, "serve", "--model", model, "--port", "0", *args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace")
            self.log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+) ", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.p.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        self.t = threading.Thread(target=self._drain, daemon=True)
        self.t.start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line.decode("utf-8", "replace"))

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=60):
        """SIGTERM; returns the exit status (LeakSanitizer makes it non-zero on a leak)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.t.join(5)
        return rc


def request(port, method, path, body=None, headers=None, timeout=120):
    """(status, headers dict with lower-case names, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body, ensure_ascii=False).encode()
    elif isinstance(body, str):
        body = body.encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, data


def post(port, path, obj, headers=None):
    s, h, b = request(port, "POST", path, obj, headers)
    try:
        return s, h, json.loads(b)
    except ValueError:
        return s, h, b


def byte_level_tokenizer():
    """tokenizer.json text of a byte-level BPE with GPT-2's 256 byte symbols and no merges:
    enough for `serve`, `verify` and `pull`, which need a tokenizer the test fixtures lack."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    return json.dumps({"version": "1.0", "added_tokens": [], "normalizer": None,
                       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                         "trim_offsets": True, "use_regex": True},
                       "post_processor": None, "decoder": {"type": "ByteLevel"},
                       "model": {"type": "BPE", "dropout": None, "unk_token": None,
                                 "ignore_merges": False, "vocab": vocab, "merges": []}})


KEEPALIVE = b": keep-alive\n\n"  # the comment a stream sends while it waits for the model


def sse_events(data):
    """Split an SSE body into its events' payloads, keep-alive comments left out; None if the
    framing is not exactly `data: X\\n\\n` (or the keep-alive comment) repeated."""
    out = []
    i = 0
    while i < len(data):
        if data.startswith(KEEPALIVE, i):
            i += len(KEEPALIVE)
            continue
        if not data.startswith(b"data: ", i):
            return None
        j = data.find(b"\n\n", i)
        if j < 0:
            return None
        out.append(data[i + 6:j])
        i = j + 2
    return out


def stream_text(port, path, obj):
    """(status, text, finish_reason, usage or None, events) of a streamed request."""
    s, h, b = request(port, "POST", path, dict(obj, stream=True))
    if s != 200:
        return s, None, None, None, None
    ev = sse_events(b)
    if not ev or ev[-1] != b"[DONE]":
        return s, None, None, None, ev
    text, fin, usage = "", None, None
    for e in ev[:-1]:
        o = json.loads(e)
        if o.get("usage"):
            usage = o["usage"]
        for ch in o["choices"]:
            if "delta" in ch:
                text += ch["delta"].get("content") or ""
            else:
                text += ch.get("text") or ""
            fin = ch.get("finish_reason") or fin
    return s, text, fin, usage, ev


def run_ref(exe, model, prompt, *, chat=False, system=None, no_think=False, max_new=16,
            temperature=0.0, top_p=1.0, top_k=0, seed=0, ignore_eos=False, prompt_ids=None):
    """What `deltafin run` prints for these settings (text, or the list of ids with
    prompt_ids), without the final newline."""
    cmd = [exe, "run", "--model", model, "--max-new", str(max_new), "--temperature",
           str(temperature), "--top-p", str(top_p), "--top-k", str(top_k), "--seed", str(seed),
           "--no-draft"]
    if prompt_ids is not None:
        cmd += ["--prompt-ids", ",".join(map(str, prompt_ids))]
    else:
        cmd += ["--prompt", prompt]
    if chat:
        cmd.append("--chat")
    if system is not None:
        cmd += ["--system", system]
    if no_think:
        cmd.append("--no-think")
    if ignore_eos:
        cmd.append("--ignore-eos")
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("deltafin run failed: " + r.stderr.decode("utf-8", "replace"))
    out = r.stdout.decode("utf-8")
    assert out.endswith("\n")
    out = out[:-1]
    if prompt_ids is not None:
        return [int(x) for x in out.split()]
    return out


def metrics(port):
    s, h, b = request(port, "GET", "/metrics")
    out = {}
    for line in b.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make-model":
        make_model(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: server_util.py make-model TOKENIZER_DIR OUT_DIR")
