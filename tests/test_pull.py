"""tests/test_pull.py — `deltafin pull`, stream mode and `deltafin verify` against a mock hub.

usage: test_pull.py DELTAFIN FIXTURES WORKDIR SCENARIO
scenarios: full resume corrupt http_errors stall disk stream stream_fp8 verify
           stream_k3 stream_k3_real setup_k3 dupes hostile

The mock hub (tests/mock_hub.py) runs in this process on 127.0.0.1 and serves the
tiny-moe-sharded checkpoint (2 shards + index, 8 experts) plus a byte-level tokenizer.json and a
file in a subfolder, with the hub's URL layout, LFS metadata, redirects and Range support.
Each scenario injects its faults and checks exit codes, messages, the published bytes and
that nothing half-written is ever at a final path.

The Kimi K3 scenarios (stream_k3, setup_k3) serve a tiny K3 (tests/reference/kimi_k3_ckpt.py
--preset tiny-k3-sharded) re-sharded the way a real checkpoint mixes its shards: per-layer
shards in which MXFP4 experts (six contiguous tensors each, not in id order) sit between the
layer's other tensors, the vision tower in the middle of one shard, and a shard without
experts. stream_k3_real serves the real Kimi-K3 layout (kimi_k3_ckpt.py --header-only: 96
sparse shards, 497,220 tensors) from disk (mock_hub.FileRepo) and checks the stream plan
from its headers alone (pull --stream --dry-run) plus a pull of its 59 MB index.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mock_hub import FileRepo, MockHub, Repo  # noqa: E402
from server_util import byte_level_tokenizer  # noqa: E402

DELTAFIN, FIXTURES, WORK, SCENARIO = sys.argv[1:5]
SRC = os.path.join(FIXTURES, "tiny-moe-sharded")
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
RUN_ARGS = ["--prompt-ids", "1,2,3", "--max-new", "16", "--temperature", "0", "--ignore-eos"]


def repo_files():
    files = {}
    for n in sorted(os.listdir(SRC)):
        if n.startswith("golden"):
            continue
        files[n] = open(os.path.join(SRC, n), "rb").read()
    files["tokenizer.json"] = byte_level_tokenizer().encode()
    files["original/params.json"] = b'{"note": "a file in a subfolder"}\n'
    return files


FILES = repo_files()
hub = MockHub()
hub.add_repo(Repo("acme/tiny", FILES))
hub.add_repo(Repo("acme/private", FILES, token="sekrit"))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def fresh(name):
    d = os.path.join(WORK, SCENARIO, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.dirname(d), exist_ok=True)
    return d


def env_for(extra=None):
    env = dict(os.environ)
    for k in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "HF_HUB_OFFLINE", "DELTAFIN_OFFLINE",
              "DELTAFIN_STREAM_BUDGET", "DELTAFIN_HOME", "XDG_CACHE_HOME", "http_proxy",
              "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(k, None)
    env["HF_ENDPOINT"] = hub.endpoint
    env["HOME"] = os.path.join(WORK, SCENARIO, "home")
    env["DELTAFIN_PULL_BACKOFF_MS"] = "50"
    env["no_proxy"] = "*"
    env.update(extra or {})
    return env


def deltafin(args, extra_env=None, timeout=120):
    t0 = time.time()
    p = subprocess.run([DELTAFIN] + args, capture_output=True, text=True, env=env_for(extra_env),
                       timeout=timeout)
    print("$ deltafin %s -> %d (%.1f s)" % (" ".join(args), p.returncode, time.time() - t0))
    if p.stderr.strip():
        print("  " + p.stderr.strip().replace("\n", "\n  "))
    return p


def pull(repo, d, *args, env=None, timeout=120):
    return deltafin(["pull", repo, "--dir", d, "--progress-interval", "0.2"] + list(args),
                    extra_env=env, timeout=timeout)


def run_ids(model_dir, env=None):
    p = deltafin(["run", "--model", model_dir] + RUN_ARGS, extra_env=env)
    return p.returncode, p.stdout.strip(), p.stderr


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def final_paths_clean(d, files=FILES):
    """Every repo file present at its final path is complete and byte-identical."""
    ok = True
    for path, data in files.items():
        fp = os.path.join(d, path)
        if os.path.exists(fp):
            ok &= check(open(fp, "rb").read() == data, "%s: %s at its final path is not the "
                        "published bytes (half-written?)" % (d, path))
    return ok


def all_published(d, files=FILES):
    for path, data in files.items():
        fp = os.path.join(d, path)
        if not check(os.path.exists(fp), "%s missing after pull" % path):
            continue
        check(open(fp, "rb").read() == data, "%s differs from the hub's bytes" % path)


def manifest(d):
    return json.load(open(os.path.join(d, ".deltafin-manifest.json")))


def partial_name(path, data, lfs=True):
    """The partial file of a listed path: SHA-256 of its hub oid, a NUL and the path."""
    oid = sha256(data) if lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return sha256(oid.encode() + b"\0" + path.encode()) + ".incomplete"


def partial_bytes(d):
    """Bytes held under DIR/.deltafin/partial."""
    pd = os.path.join(d, ".deltafin", "partial")
    return sum(os.path.getsize(os.path.join(pd, f)) for f in os.listdir(pd)) if os.path.isdir(pd) else 0


def shard_gets(path=None):
    """GETs that carried file bytes (resolve of small files, storage of LFS files)."""
    return [r for r in hub.requests(method="GET")
            if r["kind"] in ("resolve", "storage") and r["path"] is not None and
            (path is None or r["path"] == path) and
            not (r["kind"] == "resolve" and r["path"].endswith(".safetensors"))]


def st_header(data):
    n = struct.unpack("<Q", data[:8])[0]
    return 8 + n, json.loads(data[8:8 + n])


def expert_ranges(path):
    data = FILES[path]
    base, hdr = st_header(data)
    out = []
    for name, t in hdr.items():
        if name != "__metadata__" and ".mlp.experts." in name:
            out.append((base + t["data_offsets"][0], base + t["data_offsets"][1]))
    return sorted(out)


REFERENCE_IDS = None


def reference_ids():
    global REFERENCE_IDS
    if REFERENCE_IDS is None:
        rc, out, _ = run_ids(SRC)
        assert rc == 0 and out, "deltafin run on the fixture failed"
        REFERENCE_IDS = out
    return REFERENCE_IDS


# ------------------------------------------------------------------ scenarios

def scenario_full():
    d = fresh("full")
    p = pull("acme/tiny", d, env={"HF_TOKEN": "public-token"})
    check(p.returncode == 0, "full pull exits 0")
    check(p.stdout.strip().endswith(d), "pull prints the folder")
    all_published(d)
    m = manifest(d)
    check(m["repo"] == "acme/tiny" and m["complete"] and m["mode"] == "full", "manifest header")
    check(m["commit"] == hub.repos["acme/tiny"].commit, "manifest records the commit")
    listed = {f["path"]: f for f in m["files"]}
    check(set(listed) == set(FILES), "manifest lists every file: %s" % sorted(listed))
    for path, data in FILES.items():
        f = listed.get(path, {})
        check(f.get("size") == len(data) and f.get("sha256") == sha256(data),
              "manifest size/sha256 of %s" % path)
    check(listed[SHARD1].get("lfs_sha256") == sha256(FILES[SHARD1]), "lfs oid recorded")
    check(os.listdir(os.path.join(d, ".deltafin", "partial")) == [], "no partial files left")
    check(not any(r.get("auth_leak") for r in hub.log), "the token is not sent to the storage host")
    check(any(r["auth"] == "Bearer public-token" for r in hub.requests(kind="api")),
          "HF_TOKEN is sent to the hub as a bearer token")
    check("pull: " in p.stderr and "verified" in p.stderr, "plain progress lines without a TTY")
    rc, ids, _ = run_ids(d)
    check(rc == 0 and ids == reference_ids(), "run on the pulled folder gives the fixture's ids "
          "(%s vs %s)" % (ids, reference_ids()))
    v = deltafin(["verify", d])
    check(v.returncode == 0, "verify of a fresh pull exits 0")
    # pulling again fetches nothing, and drops partial files of other revisions
    stale = os.path.join(d, ".deltafin", "partial", "0" * 64 + ".incomplete")
    open(stale, "wb").write(b"old revision")
    hub.reset()
    p = pull("acme/tiny", d)
    check(p.returncode == 0 and not shard_gets(), "a second pull downloads nothing (%d GETs)"
          % len(shard_gets()))
    check(not os.path.exists(stale), "a stale partial file of another revision is removed")
    # include/exclude and --json
    d2 = fresh("filtered")
    p = pull("acme/tiny", d2, "--include", "*.json", "--exclude", "generation_*", "--json")
    check(p.returncode == 0, "filtered pull exits 0")
    got = sorted(os.path.relpath(os.path.join(r, f), d2) for r, _, fs in os.walk(d2)
                 for f in fs if ".deltafin" not in r and not f.startswith(".deltafin"))
    want = sorted(x for x in FILES if x.endswith(".json") and not x.startswith("generation_"))
    check(got == want, "--include/--exclude select %s (got %s)" % (want, got))
    events = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    check(events and events[0]["event"] == "list" and events[-1]["event"] == "done",
          "--json emits list ... done events")
    check(sum(e["event"] == "file" for e in events) == len(want), "--json emits one file event each")
    # default folder under DELTAFIN_HOME
    home = os.path.join(WORK, SCENARIO, "dfhome")
    shutil.rmtree(home, ignore_errors=True)
    p = deltafin(["pull", "acme/tiny", "--quiet", "--include", "config.json"],
                 extra_env={"DELTAFIN_HOME": home})
    want_dir = os.path.join(home, "models", "acme", "tiny")
    check(p.returncode == 0 and p.stdout.strip() == want_dir and p.stderr == "" and
          os.path.exists(os.path.join(want_dir, "config.json")),
          "default folder $DELTAFIN_HOME/models/ORG/NAME, --quiet prints nothing on stderr")
    p = deltafin(["pull", "not a repo"])
    check(p.returncode == 2 and "repository id" in p.stderr, "a malformed repo id is a usage error")


def scenario_resume():
    size = len(FILES[SHARD1])
    # within one run: the connection closes halfway, the retry continues with Range
    d = fresh("inproc")
    hub.reset()
    hub.faults["close_after"][SHARD1] = [size // 2]
    p = pull("acme/tiny", d)
    check(p.returncode == 0, "pull survives a connection closed halfway")
    all_published(d)
    gets = shard_gets(SHARD1)
    check(len(gets) == 2 and gets[1]["range"] == "bytes=%d-" % (size // 2),
          "the retry asks for the rest with Range (%s)" % [g["range"] for g in gets])
    check(hub.served.get(SHARD1) == size, "no byte served twice (%s of %d)"
          % (hub.served.get(SHARD1), size))
    check("retry" in p.stderr, "the retry is reported")
    # across runs: the first run gives up, the second resumes from the partial file
    d = fresh("twice")
    hub.reset()
    size2 = len(FILES[SHARD2])
    hub.faults["close_after"][SHARD2] = [size2 // 3]
    p = pull("acme/tiny", d, "--retries", "0")
    check(p.returncode == 1 and SHARD2 in p.stderr and "closed" in p.stderr,
          "an interrupted pull fails naming the file")
    check(not os.path.exists(os.path.join(d, SHARD2)), "no half file at the final path")
    final_paths_clean(d)
    parts = os.listdir(os.path.join(d, ".deltafin", "partial"))
    check(len(parts) == 1 and parts[0].endswith(".incomplete") and
          os.path.getsize(os.path.join(d, ".deltafin", "partial", parts[0])) == size2 // 3,
          "the partial download stays for resume (%s)" % parts)
    m = manifest(d)
    check(not m["complete"] and m["pending"] == [SHARD2], "manifest marks the pull incomplete")
    v = deltafin(["verify", d])
    check(v.returncode == 1 and SHARD2 in v.stderr, "verify reports the missing file")
    # a symbolic link planted in the partial's place (a shared --dir) is never written through
    part = os.path.join(d, ".deltafin", "partial", parts[0])
    keep = open(part, "rb").read()
    victim = os.path.join(WORK, SCENARIO, "victim-file")
    with open(victim, "wb") as f:
        f.write(b"precious")
    os.unlink(part)
    os.symlink(victim, part)
    p = pull("acme/tiny", d)
    check(p.returncode == 1 and "symbolic link" in p.stderr and
          open(victim, "rb").read() == b"precious",
          "a symlinked partial is refused and its target untouched (%s)" % p.stderr.strip()[-160:])
    os.unlink(part)
    with open(part, "wb") as f:
        f.write(keep)
    p = pull("acme/tiny", d)
    check(p.returncode == 0 and "resuming at byte %d" % (size2 // 3) in p.stderr,
          "the next pull resumes at the partial's end")
    all_published(d)
    check(hub.served.get(SHARD2) == size2, "resume re-downloads nothing (%s of %d)"
          % (hub.served.get(SHARD2), size2))
    check(deltafin(["verify", d]).returncode == 0, "verify after the resumed pull")
    # a server that ignores Range: the partial is started over, the result still verifies
    d = fresh("norange")
    hub.reset()
    hub.faults["close_after"][SHARD1] = [size // 2]
    hub.faults["ignore_range"].add(SHARD1)
    p = pull("acme/tiny", d)
    check(p.returncode == 0, "pull completes when the server ignores Range")
    all_published(d)


def scenario_corrupt():
    d = fresh("lfs")
    hub.reset()
    size2 = len(FILES[SHARD2])
    hub.faults["flip"][SHARD2] = size2 // 3
    p = pull("acme/tiny", d)
    check(p.returncode == 1, "a corrupted download fails")
    check(SHARD2 in p.stderr and "SHA-256 mismatch" in p.stderr and
          sha256(FILES[SHARD2]) in p.stderr, "the error names the file, SHA-256 and the oid")
    check(not os.path.exists(os.path.join(d, SHARD2)), "the corrupt file is not published")
    final_paths_clean(d)
    check(os.path.exists(os.path.join(d, SHARD1)), "the other files are published")
    check(os.listdir(os.path.join(d, ".deltafin", "partial")) == [], "the corrupt bytes are "
          "not kept for resume")
    check(manifest(d)["pending"] == [SHARD2], "manifest lists the corrupt file as pending")
    hub.reset()
    p = pull("acme/tiny", d)
    check(p.returncode == 0, "a clean retry completes")
    all_published(d)
    # a small (git) file is checked against its blob id
    d = fresh("git")
    hub.reset()
    hub.faults["flip"]["config.json"] = 10
    p = pull("acme/tiny", d)
    check(p.returncode == 1 and "config.json" in p.stderr and "git blob SHA-1 mismatch" in p.stderr,
          "a corrupted small file is caught by its git blob id")
    check(not os.path.exists(os.path.join(d, "config.json")), "config.json not published")
    final_paths_clean(d)
    # a partial from an earlier run that does not verify is discarded and fetched again
    d = fresh("badpartial")
    hub.reset()
    hub.faults["close_after"][SHARD1] = [1000]
    pull("acme/tiny", d, "--retries", "0")
    part = os.path.join(d, ".deltafin", "partial", partial_name(SHARD1, FILES[SHARD1]))
    if check(os.path.exists(part), "partial file kept"):
        with open(part, "r+b") as f:
            f.seek(500)
            f.write(b"\xff")
    hub.reset()
    p = pull("acme/tiny", d)
    check(p.returncode == 0 and "does not verify" in p.stderr,
          "a corrupt partial is detected after resume and downloaded again")
    all_published(d)


def scenario_http_errors():
    # 401 on a gated/private repository
    d = fresh("private")
    hub.reset()
    p = pull("acme/private", d)
    check(p.returncode == 1 and "401" in p.stderr and "HF_TOKEN" in p.stderr,
          "401 without a token says to set HF_TOKEN")
    check(not os.path.exists(d), "a refused pull leaves no folder")
    check(len(hub.requests(kind="api")) == 1, "401 is not retried")
    p = pull("acme/private", d, env={"HF_TOKEN": "wrong"})
    check(p.returncode == 1 and "not accepted" in p.stderr, "401 with a wrong token says so")
    p = pull("acme/private", d, env={"HF_TOKEN": "sekrit"})
    check(p.returncode == 0, "the right token pulls a private repo")
    all_published(d)
    # token from the huggingface token file
    d = fresh("tokenfile")
    home = env_for()["HOME"]
    os.makedirs(os.path.join(home, ".cache", "huggingface"), exist_ok=True)
    open(os.path.join(home, ".cache", "huggingface", "token"), "w").write("sekrit\n")
    p = pull("acme/private", d, "--include", "config.json")
    check(p.returncode == 0, "the token is read from ~/.cache/huggingface/token")
    os.remove(os.path.join(home, ".cache", "huggingface", "token"))
    # 404s: repository, revision, file
    d = fresh("404")
    p = pull("acme/nope", d)
    check(p.returncode == 1 and "not found" in p.stderr and "acme/nope" in p.stderr,
          "a missing repository is named")
    p = pull("acme/tiny", d, "--revision", "v9")
    check(p.returncode == 1 and "revision 'v9' not found" in p.stderr, "a missing revision is named")
    hub.reset()
    hub.faults["status"][SHARD1] = [404]
    p = pull("acme/tiny", d)
    check(p.returncode == 1 and SHARD1 in p.stderr and "404" in p.stderr, "a file 404 names it")
    check(len([r for r in hub.requests(kind="resolve") if r["path"] == SHARD1]) == 1,
          "404 is not retried")
    check(not os.path.exists(os.path.join(d, SHARD1)), "nothing at the 404 file's path")
    final_paths_clean(d)
    # transient 500/503: retried with backoff, then success
    d = fresh("500")
    hub.reset()
    hub.faults["status"][SHARD2] = [500, 502]
    hub.faults["status"]["api"] = [503]
    p = pull("acme/tiny", d)
    check(p.returncode == 0 and "HTTP 500" in p.stderr, "transient 5xx are retried")
    all_published(d)
    # persistent 500: refused after the retries, nothing half-written
    d = fresh("500forever")
    hub.reset()
    hub.faults["status"][SHARD2] = [500] * 50
    p = pull("acme/tiny", d, "--retries", "2")
    check(p.returncode == 1 and SHARD2 in p.stderr and "HTTP 500" in p.stderr,
          "a persistent 500 fails naming the file")
    check(len([r for r in hub.requests(kind="resolve") if r["path"] == SHARD2]) == 3,
          "tried 1 + 2 retries")
    check(not os.path.exists(os.path.join(d, SHARD2)), "nothing at the failed file's path")
    final_paths_clean(d)
    # a captive portal's page (a complete 200 of the wrong size): discarded and retried
    d = fresh("portal")
    hub.reset()
    hub.faults["portal"][SHARD1] = [1, 1]
    p = pull("acme/tiny", d)
    check(p.returncode == 0 and "not the" in p.stderr and "text/html" in p.stderr
          and "captive portal" in p.stderr, "a captive-portal page is discarded and retried: "
          + p.stderr.strip()[-300:])
    all_published(d)
    # ... and when it never goes away, nothing of it is left to resume from
    d = fresh("portalforever")
    hub.reset()
    hub.faults["portal"][SHARD1] = [1] * 50
    p = pull("acme/tiny", d, "--retries", "1")
    check(p.returncode == 1 and SHARD1 in p.stderr and "captive portal" in p.stderr,
          "a persistent portal page fails naming the file")
    left = partial_bytes(d)
    check(left == 0, f"no bytes of the portal page kept as a partial file ({left} bytes)")
    final_paths_clean(d)
    # a page larger than the file: the same (not a hard "more than listed" failure)
    big = len(FILES[SHARD1]) + 300000
    d = fresh("portalbig")
    hub.reset()
    hub.faults["portal"][SHARD1] = [big]
    p = pull("acme/tiny", d)
    check(p.returncode == 0 and "more than" in p.stderr and "captive portal" in p.stderr and
          "retry" in p.stderr, "a portal page larger than the file is discarded and retried: "
          + p.stderr.strip()[-300:])
    all_published(d)
    d = fresh("portalbigforever")
    hub.reset()
    hub.faults["portal"][SHARD1] = [big] * 50
    p = pull("acme/tiny", d, "--retries", "1")
    check(p.returncode == 1 and SHARD1 in p.stderr and "captive portal" in p.stderr and
          len(hub.requests(kind="storage", path=SHARD1)) == 2,
          "a persistent large portal page is retried, then fails naming the file")
    left = partial_bytes(d)
    check(left == 0, f"no bytes of the large portal page kept as a partial file ({left} bytes)")
    final_paths_clean(d)


def scenario_stall():
    d = fresh("stall")
    hub.reset()
    size = len(FILES[SHARD1])
    hub.faults["stall_after"][SHARD1] = [size // 2]
    t0 = time.time()
    p = pull("acme/tiny", d, "--timeout", "1")
    check(p.returncode == 0 and "stalled" in p.stderr, "a stalled connection is detected and "
          "retried")
    check(time.time() - t0 < 30, "stall detection is bounded by --timeout")
    all_published(d)
    gets = shard_gets(SHARD1)
    check(len(gets) == 2 and gets[1]["range"] == "bytes=%d-" % (size // 2),
          "the retry after a stall resumes")
    d = fresh("stall-fail")
    hub.reset()
    hub.faults["stall_after"][SHARD1] = [size // 2]
    p = pull("acme/tiny", d, "--timeout", "1", "--retries", "0")
    check(p.returncode == 1 and SHARD1 in p.stderr and "stalled" in p.stderr,
          "a stall without retries fails naming the file")
    check(not os.path.exists(os.path.join(d, SHARD1)), "nothing half-written after a stall")
    final_paths_clean(d)


def scenario_disk():
    huge = Repo("acme/huge", FILES, sizes={SHARD1: 1 << 50})
    hub.add_repo(huge)
    d = fresh("huge")
    hub.reset()
    p = pull("acme/huge", d)
    check(p.returncode == 1 and "not enough free disk" in p.stderr, "the free-disk check refuses")
    check(not shard_gets(), "nothing is downloaded before the disk check")
    final_paths_clean(d)


def scenario_dupes():
    """Files of identical content: each has its own partial file, all are published."""
    blob = os.urandom(200000)
    files = {"config.json": FILES["config.json"], "w0.bin": blob, "w1.bin": blob}
    for i in range(8):
        files["sub%d/generation_config.json" % i] = b"{}\n"
    hub.add_repo(Repo("acme/dupes", files))
    d = fresh("parallel")
    hub.reset()
    p = pull("acme/dupes", d, "--jobs", "8")
    check(p.returncode == 0, "identical small files download in parallel")
    all_published(d, files)
    check(partial_bytes(d) == 0 and os.listdir(os.path.join(d, ".deltafin", "partial")) == [],
          "no partial files left")
    # both LFS copies cut at a third (the storage serves them under w0.bin): one partial each
    d = fresh("resume")
    hub.reset()
    third = len(blob) // 3
    hub.faults["close_after"]["w0.bin"] = [third, third]
    p = pull("acme/dupes", d, "--retries", "0", "--include", "w*.bin")
    parts = sorted(os.listdir(os.path.join(d, ".deltafin", "partial")))
    want = sorted(partial_name(x, blob) for x in ("w0.bin", "w1.bin"))
    check(p.returncode == 1 and parts == want and partial_bytes(d) == 2 * third,
          "each copy keeps its own partial file (%s, %d bytes)" % (parts, partial_bytes(d)))
    final_paths_clean(d, files)
    # the next run resumes both, the server ignoring Range for one: each restarts its own file
    hub.reset()
    hub.faults["ignore_range"].add("w0.bin")
    p = pull("acme/dupes", d)
    check(p.returncode == 0 and p.stderr.count("resuming at byte %d" % third) == 2,
          "both copies resume from their own partial")
    all_published(d, files)
    check(os.listdir(os.path.join(d, ".deltafin", "partial")) == [], "partials swept")
    m = manifest(d)
    listed = {f["path"]: f.get("sha256") for f in m["files"]}
    check(m["complete"] and listed.get("w0.bin") == listed.get("w1.bin") == sha256(blob),
          "the manifest records both copies")


def scenario_hostile():
    """Links planted in the folder, listings without a usable hash or with reserved names."""
    files = {"config.json": FILES["config.json"], "sub/x.json": b'{"x": 1}\n',
             SHARD1: FILES[SHARD1]}
    hub.add_repo(Repo("acme/hostile", files))
    outside = os.path.join(WORK, SCENARIO, "outside")
    shutil.rmtree(outside, ignore_errors=True)
    os.makedirs(outside)
    # a folder of the listing planted as a link to elsewhere
    d = fresh("sublink")
    os.makedirs(d)
    os.symlink(outside, os.path.join(d, "sub"))
    hub.reset()
    p = pull("acme/hostile", d)
    check(p.returncode == 1 and "sub" in p.stderr and "symbolic link" in p.stderr,
          "a linked intermediate folder is refused: " + p.stderr.strip()[-200:])
    check(os.listdir(outside) == [], "nothing written through the link (%s)" % os.listdir(outside))
    check(open(os.path.join(d, "config.json"), "rb").read() == files["config.json"],
          "the other files are published")
    # .deltafin planted as a link to another user's folder
    d = fresh("metalink")
    os.makedirs(d)
    os.symlink(outside, os.path.join(d, ".deltafin"))
    p = pull("acme/hostile", d)
    check(p.returncode == 1 and ".deltafin" in p.stderr and "symbolic link" in p.stderr,
          "a linked .deltafin is refused: " + p.stderr.strip()[-200:])
    check(os.listdir(outside) == [], "no lock or partial in the link's target (%s)"
          % os.listdir(outside))
    # the partial file swapped for another while it downloads: never published
    d = fresh("swap")
    hub.reset()

    def swap(path, rng):
        pd = os.path.join(d, ".deltafin", "partial")
        for f in os.listdir(pd):
            with open(os.path.join(pd, "x"), "wb") as fh:
                fh.write(b"foreign bytes")
            os.replace(os.path.join(pd, "x"), os.path.join(pd, f))
    hub.on_fetch = swap
    p = pull("acme/hostile", d, "--include", SHARD1, "--retries", "0")
    hub.on_fetch = None
    check(p.returncode == 1 and "replaced" in p.stderr, "a swapped partial is refused: "
          + p.stderr.strip()[-200:])
    check(not os.path.exists(os.path.join(d, SHARD1)), "the swapped file is not published")
    # small files without a usable blobId
    for blob_id, what in ((None, "missing"), ("zz", "malformed")):
        bad = Repo("acme/noblob-%s" % what, files)
        bad.blob_ids["sub/x.json"] = blob_id
        hub.add_repo(bad)
        d = fresh("noblob-" + what)
        p = pull(bad.id, d)
        check(p.returncode == 1 and "sub/x.json" in p.stderr and "blobId" in p.stderr,
              "a %s blobId is refused naming the file and the field: %s"
              % (what, p.stderr.strip()[-200:]))
        check(not os.path.exists(d), "nothing written for a listing without a usable blobId")
    # a repository file named like the manifest (or under .deltafin)
    for name in (".deltafin-manifest.json", ".deltafin-manifest.json.tmp.1"):
        bad = hub.add_repo(Repo("acme/reserved" + str(len(name)), dict(files, **{name: b"{}"})))
        d = fresh("reserved")
        p = pull(bad.id, d)
        check(p.returncode == 1 and name in p.stderr and "keeps for itself" in p.stderr,
              "%s in the listing is refused: %s" % (name, p.stderr.strip()[-200:]))
        check(not os.path.exists(d), "nothing written for a listing with a reserved name")


def dir_bytes(d):
    total = 0
    for r, _, fs in os.walk(d):
        for f in fs:
            total += os.path.getsize(os.path.join(r, f))
    return total


def scenario_stream():
    d = fresh("stream")
    hub.reset()
    p = pull("acme/tiny", d, "--stream", "--cache-budget", "1M")
    check(p.returncode == 0, "pull --stream exits 0")
    m = manifest(d)
    check(m["mode"] == "stream" and m["cache_budget"] == 1 << 20, "manifest: stream mode, budget")
    for shard in (SHARD1, SHARD2):
        data = FILES[shard]
        got = open(os.path.join(d, shard), "rb").read()
        check(len(got) == len(data), "%s has its full size" % shard)
        exp = expert_ranges(shard)
        mask = bytearray(len(data))
        for a, b in exp:
            mask[a:b] = b"\1" * (b - a)
            check(got[a:b] == bytes(b - a), "%s: expert bytes %d..%d are holes" % (shard, a, b))
        same = all(got[i] == data[i] for i in range(len(data)) if not mask[i])
        check(same, "%s: header and non-expert tensors are the hub's bytes" % shard)
    # served bytes during the pull: no expert byte was downloaded
    for g in shard_gets():
        if g["path"].endswith(".safetensors") and g["range"]:
            a, b = g["range"][6:].split("-")
            a, b = int(a), int(b) + 1
            for x, y in expert_ranges(g["path"]):
                check(b <= x or a >= y, "pull --stream fetched expert bytes %d..%d" % (a, b))
    check(deltafin(["verify", d]).returncode == 0, "verify accepts a stream-mode folder")

    # first run: experts come over HTTP Range, ids equal the full model's
    hub.reset()
    cache = os.path.join(d, ".deltafin", "experts", "blobs")
    peak = [0]
    hub.on_fetch = lambda path, rng: peak.__setitem__(0, max(peak[0], dir_bytes(cache)))
    rc, ids, err = run_ids(d)
    check(rc == 0 and ids == reference_ids(), "stream mode gives the full model's ids (%s vs %s)"
          % (ids, reference_ids()))
    gets = shard_gets()
    check(len(gets) > 0, "the first run fetches experts (%d requests)" % len(gets))
    allowed = {}
    for shard in (SHARD1, SHARD2):
        allowed[shard] = expert_ranges(shard)
    for g in gets:
        check(g["range"] is not None, "expert fetches are Range requests")
        a, b = g["range"][6:].split("-")
        a, b = int(a), int(b) + 1
        inside = [r for r in allowed[g["path"]] if r[0] >= a and r[1] <= b]
        check(sum(y - x for x, y in inside) == b - a,
              "a fetch covers exactly whole expert tensors (%s %d..%d)" % (g["path"], a, b))
    check(dir_bytes(cache) <= 1 << 20 and peak[0] <= 1 << 20, "the cache stays in its budget")
    # second run: everything from the cache
    hub.reset()
    rc, ids2, _ = run_ids(d)
    check(rc == 0 and ids2 == reference_ids(), "second stream run gives the same ids")
    check(len(hub.log) == 0, "the second run makes no requests at all (%d)" % len(hub.log))
    # offline with a full cache works; with an empty cache it is a clear error
    rc, ids3, _ = run_ids(d, env={"HF_HUB_OFFLINE": "1"})
    check(rc == 0 and ids3 == reference_ids(), "offline from a warm cache")
    # a small budget: evictions, never above the budget, same ids
    budget = 3 * 24576 + 1000
    hub.reset()
    peak = [0]
    hub.on_fetch = lambda path, rng: peak.__setitem__(0, max(peak[0], dir_bytes(cache)))
    rc, ids4, err = run_ids(d, env={"DELTAFIN_STREAM_BUDGET": str(budget),
                                    "DELTAFIN_STREAM_STATS": "1"})
    check(rc == 0 and ids4 == reference_ids(), "a small cache budget gives the same ids")
    check(dir_bytes(cache) <= budget and peak[0] <= budget,
          "the cache never exceeds a small budget (peak %d, end %d, budget %d)"
          % (peak[0], dir_bytes(cache), budget))
    check("evictions" in err and len(shard_gets()) > 0, "a small budget evicts and refetches")
    rc, _, err = run_ids(d, env={"DELTAFIN_STREAM_BUDGET": "1000"})
    check(rc != 0 and "smaller than one expert" in err, "a budget below one expert is refused")
    # offline with a cold cache
    d2 = fresh("stream-cold")
    hub.reset()
    pull("acme/tiny", d2, "--stream", "--cache-budget", "1M")
    hub.reset()
    rc, _, err = run_ids(d2, env={"HF_HUB_OFFLINE": "1"})
    check(rc != 0 and "not in the expert cache" in err and "offline" in err,
          "offline with a cold cache names the missing expert")
    check(not shard_gets(), "offline makes no requests")
    # a hub error while streaming: transient is retried, persistent is reported
    hub.reset()
    hub.faults["status"][SHARD1] = [503]
    hub.faults["status"][SHARD2] = [503]
    rc, ids5, _ = run_ids(d2)
    check(rc == 0 and ids5 == reference_ids(), "stream mode retries a transient 503")
    shutil.rmtree(os.path.join(d2, ".deltafin", "experts"))
    hub.reset()
    hub.faults["status"][SHARD1] = [404] * 100
    hub.faults["status"][SHARD2] = [404] * 100
    rc, _, err = run_ids(d2)
    check(rc != 0 and "expert" in err and "404" in err, "a persistent 404 names layer/expert")
    # the pull --stream folder pulled again in full mode becomes a full folder
    hub.reset()
    p = pull("acme/tiny", d2)
    check(p.returncode == 0, "pull without --stream over a stream folder")
    all_published(d2)
    check(manifest(d2)["mode"] == "full", "the folder is a full folder again")


def scenario_stream_fp8():
    """FP8 experts in stream mode: each expert's F8_E4M3 weights and F32 block scales (all
    holes after pull --stream) come as one cached blob, stay FP8, and give the complete
    checkpoint's ids and logits bit for bit."""
    src = os.path.join(FIXTURES, "tiny-ds-fp8")
    files = {n: open(os.path.join(src, n), "rb").read() for n in sorted(os.listdir(src))
             if not n.startswith("golden")}
    hub.add_repo(Repo("acme/tiny-fp8", files))
    d = fresh("stream-fp8")
    hub.reset()
    p = pull("acme/tiny-fp8", d, "--stream", "--cache-budget", "1M")
    check(p.returncode == 0, "pull --stream of an FP8 checkpoint exits 0")
    base, hdr = st_header(files["model.safetensors"])
    expert = sorted((base + t["data_offsets"][0], base + t["data_offsets"][1], n)
                    for n, t in hdr.items() if n != "__metadata__" and ".mlp.experts." in n)
    got = open(os.path.join(d, "model.safetensors"), "rb").read()
    check(any(n.endswith("_scale_inv") for _, _, n in expert) and
          all(got[a:b] == bytes(b - a) for a, b, _ in expert),
          "expert weights and their block scales are holes")

    def ids_logits(model_dir, tag):
        out = os.path.join(WORK, SCENARIO, tag + ".f32")
        p = deltafin(["run", "--model", model_dir, "--logits-out", out] + RUN_ARGS)
        return p.returncode, p.stdout.strip(), open(out, "rb").read() if p.returncode == 0 else b""

    rc0, ids0, lg0 = ids_logits(src, "full")
    hub.reset()
    rc, ids, lg = ids_logits(d, "stream")
    check(rc0 == 0 and rc == 0 and ids == ids0 and lg == lg0 and len(lg) > 0,
          "FP8 stream mode: ids and logits identical to the complete checkpoint (%s vs %s)"
          % (ids, ids0))
    fetched = []
    for g in shard_gets("model.safetensors"):
        a, b = g["range"][6:].split("-")
        fetched.append((int(a), int(b) + 1))
    covered = [(a, b) for a, b, _ in expert if any(x <= a and b <= y for x, y in fetched)]
    check(sum(b - a for a, b in fetched) == sum(b - a for a, b in covered),
          "fetches cover exactly whole expert tensors")
    scales = [n for a, b, n in expert if n.endswith("_scale_inv") and (a, b) in covered]
    check(len(scales) > 0, "block scales were fetched with their weights (%d)" % len(scales))
    blobs = os.path.join(d, ".deltafin", "experts", "blobs")
    stored = sum(b - a for a, b in covered)
    check(dir_bytes(blobs) <= stored + 16 * len(covered),
          "the cache holds the stored FP8 bytes (%d B for %d B of tensors)" % (dir_bytes(blobs), stored))
    hub.reset()
    rc, ids2, lg2 = ids_logits(d, "stream2")
    check(rc == 0 and ids2 == ids0 and lg2 == lg0 and not shard_gets(),
          "second FP8 stream run: same bits, everything from the cache")


def scenario_verify():
    d = fresh("verify")
    hub.reset()
    check(pull("acme/tiny", d).returncode == 0, "pull for verify")
    before = {f: os.stat(os.path.join(r, f)).st_mtime_ns for r, _, fs in os.walk(d) for f in fs}
    hub.reset()
    v = deltafin(["verify", d])
    check(v.returncode == 0 and "0 problems" in v.stdout, "verify of a good folder")
    check("tokenizer.json: loads" in v.stdout, "verify loads the tokenizer")
    check(len(hub.log) == 0, "verify makes no network request")
    after = {f: os.stat(os.path.join(r, f)).st_mtime_ns for r, _, fs in os.walk(d) for f in fs}
    check(before == after, "verify writes nothing")

    def damaged(name, fn, want):
        dd = fresh("verify-" + name)
        shutil.copytree(d, dd)
        fn(dd)
        v = deltafin(["verify", dd])
        ok = v.returncode == 1
        for w in want:
            ok &= w in v.stderr
        check(ok, "verify finds %s (wants %s)" % (name, want))

    def flip(dd, path, off):
        with open(os.path.join(dd, path), "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 1]))

    damaged("flipped-byte", lambda dd: flip(dd, SHARD1, 5000), [SHARD1, "SHA-256"])
    damaged("truncated", lambda dd: os.truncate(os.path.join(dd, SHARD2), 1000),
            [SHARD2, "size 1000"])
    damaged("missing", lambda dd: os.remove(os.path.join(dd, "tokenizer.json")),
            ["tokenizer.json", "missing"])

    def bad_config(dd):
        p = os.path.join(dd, "config.json")
        c = json.load(open(p))
        c["moe_intermediate_size"] = 32
        json.dump(c, open(p, "w"))
    damaged("config-shape", bad_config, ["config.json", "weights do not match config.json"])

    def bad_tok(dd):
        open(os.path.join(dd, "tokenizer.json"), "w").write("{")
    damaged("tokenizer", bad_tok, ["tokenizer.json"])

    def bad_header(dd):
        with open(os.path.join(dd, SHARD1), "r+b") as f:
            f.write(struct.pack("<Q", 1 << 40))
    damaged("header", bad_header, ["safetensors", SHARD1])

    def bad_manifest(dd):
        open(os.path.join(dd, ".deltafin-manifest.json"), "w").write('{"format": 1}')
    damaged("manifest", bad_manifest, [".deltafin-manifest.json", "format"])
    v = deltafin(["verify", os.path.join(WORK, "does-not-exist")])
    check(v.returncode == 1 and "not a folder" in v.stderr, "verify of a missing folder")
    v = deltafin(["verify", SRC])
    check(v.returncode == 0 and "no .deltafin-manifest.json" in v.stdout,
          "a folder without manifest is checked structurally, with a note")


# ------------------------------------------------------------------ Kimi K3

K3_REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference", "kimi_k3_ckpt.py")
DSPARK_CKPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference", "dspark_ckpt.py")
K3_EXPERT = "block_sparse_moe.experts."


def st_write(path, names, tensors):
    """A safetensors file holding `names` in that order (tensors: name -> (dtype, shape, bytes))."""
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for n in names:
        dt, shape, b = tensors[n]
        hdr[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for n in names:
            f.write(tensors[n][2])


def st_tensors(folder):
    """Every tensor of a folder's shards: name -> (dtype, shape, bytes)."""
    out = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            data = open(os.path.join(folder, fn), "rb").read()
            base, hdr = st_header(data)
            for n, t in hdr.items():
                if n != "__metadata__":
                    a, b = t["data_offsets"]
                    out[n] = (t["dtype"], t["shape"], data[base + a:base + b])
    return out


def k3_expert_of(name):
    """(layer, expert) of a routed-expert tensor name, else None."""
    if K3_EXPERT not in name:
        return None
    l = int(name.split("layers.")[1].split(".")[0])
    return l, int(name.split(K3_EXPERT)[1].split(".")[0])


def make_k3_mixed(dst):
    """tiny-k3-sharded re-sharded like a real checkpoint (module comment). Returns dst."""
    src = os.path.join(WORK, SCENARIO, "k3-gen")
    shutil.rmtree(src, ignore_errors=True)
    subprocess.run([sys.executable, K3_REF, "--preset", "tiny-k3-sharded", "--out", src],
                   check=True, capture_output=True, timeout=120)
    T = st_tensors(src)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for fn in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, fn), os.path.join(dst, fn))
    layer_of = lambda n: int(n.split("layers.")[1].split(".")[0]) if "layers." in n else -1
    n_layers = 1 + max(layer_of(n) for n in T)
    vision = sorted(n for n in T if not n.startswith("language_model."))
    glob = sorted(n for n in T if n.startswith("language_model.") and layer_of(n) < 0)
    shards = [[] for _ in range(4)]
    rot = 0
    for l in range(n_layers):
        own = sorted(n for n in T if layer_of(n) == l and not k3_expert_of(n))
        ex = sorted({k3_expert_of(n)[1] for n in T if k3_expert_of(n) and k3_expert_of(n)[0] == l})
        ex = ex[1::2][::-1] + ex[0::2]  # not in id order
        names = own[:len(own) // 2]
        rest = own[len(own) // 2:]
        for i, e in enumerate(ex):
            names += ["language_model.model.layers.%d.%s%d.%s.%s" % (l, K3_EXPERT, e, w, part)
                      for w in ("w1", "w2", "w3") for part in ("weight_packed", "weight_scale")]
            if i % 4 == 3 and rest:  # the layer's other tensors between its experts
                names.append(rest.pop(0))
            if l == 2 and i == len(ex) // 2:
                names += vision  # the vision tower in the middle of a shard
        names += rest
        shards[min(l // 2, 2)] += names
    shards[0] = [n for n in glob if "embed_tokens" in n] + shards[0]
    shards[3] = [n for n in glob if "embed_tokens" not in n]  # no experts: a complete file
    assert sorted(sum(shards, [])) == sorted(T)
    wmap, total = {}, 0
    for k, names in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        st_write(os.path.join(dst, fn), names, T)
        for n in names:
            wmap[n] = fn
            total += len(T[n][2])
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=1)
    return dst


def k3_layout(files):
    """Per shard: expert extents {(layer, expert): (start, end)} (each expert's six tensors),
    vision ranges [(start, end)] and every other tensor's ranges, as absolute file offsets."""
    out = {}
    for path, data in files.items():
        if not path.endswith(".safetensors"):
            continue
        base, hdr = st_header(data)
        ex, vis, other = {}, [], []
        for n, t in hdr.items():
            if n == "__metadata__":
                continue
            a, b = base + t["data_offsets"][0], base + t["data_offsets"][1]
            k = k3_expert_of(n)
            if k:
                x = ex.get(k, (a, b))
                ex[k] = (min(x[0], a), max(x[1], b))
            elif not n.startswith("language_model."):
                vis.append((a, b))
            else:
                other.append((a, b))
        out[path] = (ex, vis, other)
    return out


def get_ranges(gets):
    out = []
    for g in gets:
        if g["path"].endswith(".safetensors") and g["range"]:
            a, b = g["range"][6:].split("-")
            out.append((g["path"], int(a), int(b) + 1))
    return out


def k3_run(model_dir, tag, env=None):
    """deltafin run (greedy ids) with the logits of the prompt: (rc, ids, logits, stderr)."""
    out = os.path.join(WORK, SCENARIO, tag + ".f32")
    p = deltafin(["run", "--model", model_dir, "--logits-out", out] + RUN_ARGS, extra_env=env)
    lg = open(out, "rb").read() if p.returncode == 0 else b""
    return p.returncode, p.stdout.strip(), lg, p.stderr


def k3_repo(name):
    src = make_k3_mixed(os.path.join(WORK, SCENARIO, "k3-mixed"))
    files = {n: open(os.path.join(src, n), "rb").read() for n in sorted(os.listdir(src))}
    hub.add_repo(Repo(name, files))
    return src, files


def scenario_stream_k3():
    """Kimi K3 in stream mode: MXFP4 experts (weight_packed + weight_scale) and the vision
    tower are holes after pull --stream; run fetches each expert's six tensors in one Range
    request on first use and gives the full folder's ids and logits bit for bit; the vision
    tower is never fetched."""
    src, files = k3_repo("acme/tiny-k3")
    layout = k3_layout(files)
    rc0, ids0, lg0, _ = k3_run(src, "full")
    check(rc0 == 0 and ids0 and lg0, "run on the full mixed K3 folder")
    d = fresh("stream-k3")
    hub.reset()
    p = pull("acme/tiny-k3", d, "--stream", "--cache-budget", "1M")
    check(p.returncode == 0, "pull --stream of a K3 folder exits 0")
    check("kimi_k3 wrapper" in p.stderr and "language_model." in p.stderr,
          "pull says the wrapper's other towers are not downloaded")
    m = manifest(d)
    mf = {f["path"]: f for f in m["files"]}
    for path, (ex, vis, other) in layout.items():
        data, got = files[path], open(os.path.join(d, path), "rb").read()
        check(len(got) == len(data), "%s has its full size" % path)
        holes = sorted(list(ex.values()) + vis)
        check(all(got[a:b] == bytes(b - a) for a, b in holes), "%s: experts and vision are holes" % path)
        check(all(got[a:b] == data[a:b] for a, b in other), "%s: text tensors are the hub's bytes" % path)
        check(got[:st_header(data)[0]] == data[:st_header(data)[0]], "%s: header written" % path)
        f = mf.get(path, {})
        if ex or vis:
            check(f.get("sparse") and f.get("omitted_bytes") == sum(b - a for a, b in ex.values())
                  and f.get("unused_bytes", 0) == sum(b - a for a, b in vis),
                  "%s: manifest counts expert and never-read bytes (%s)" % (path, f.get("unused_bytes")))
        else:
            check(not f.get("sparse") and f.get("sha256") == sha256(data),
                  "%s: a shard without experts is downloaded and verified in full" % path)
    check(sum(len(v[1]) for v in layout.values()) > 0 and
          sum(1 for v in layout.values() if v[0]) >= 3, "the layout mixes experts and vision")
    for path, a, b in get_ranges(shard_gets()):
        ex, vis, _ = layout[path]
        for x, y in list(ex.values()) + vis:
            check(b <= x or a >= y, "pull --stream fetched expert or vision bytes %s %d..%d" % (path, a, b))
    v = deltafin(["verify", d])
    check(v.returncode == 0 and "never read" in v.stdout, "verify accepts a K3 stream folder")

    hub.reset()
    rc, ids, lg, err = k3_run(d, "stream", env={"DELTAFIN_STREAM_STATS": "1"})
    check(rc == 0 and ids == ids0 and lg == lg0,
          "K3 stream mode: ids and logits identical to the full folder (%s vs %s)" % (ids, ids0))
    fetched = get_ranges(shard_gets())
    check(len(fetched) > 0, "the first run fetches experts (%d requests)" % len(fetched))
    for path, a, b in fetched:
        ex, vis, _ = layout[path]
        check((a, b) in ex.values(), "one request is exactly one expert's six tensors (%s %d..%d)"
              % (path, a, b))
    check(len(set(fetched)) == len(fetched), "no expert is fetched twice")
    check("%d expert fetches (%d requests" % (len(fetched), len(fetched)) in err,
          "one request per expert fetch (stats: %s)" % err.strip().splitlines()[-1:])
    hub.reset()
    rc, ids2, lg2, _ = k3_run(d, "stream2")
    check(rc == 0 and ids2 == ids0 and lg2 == lg0 and not hub.log,
          "second K3 stream run: same bits, no request at all")
    # back to a full folder
    hub.reset()
    p = pull("acme/tiny-k3", d)
    check(p.returncode == 0 and manifest(d)["mode"] == "full", "pull without --stream completes it")
    all_published(d, files)


def scenario_stream_k3_real():
    """The real Kimi-K3 layout (96 shards, 497,220 tensors, 1.56 TB described, sparse on disk)
    served from disk: pull --stream --dry-run reads the 96 headers only and plans exactly
    the text spine up front, the routed experts as holes to stream and the vision tower as
    never read (K3.md §1.5); the 59 MB index is pulled and verified."""
    src = os.environ.get("DF_K3_REAL_DIR", "")  # the ctest fixture k3_real's folder, read-only
    if not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        src = os.path.join(WORK, SCENARIO, "k3-real")
        shutil.rmtree(src, ignore_errors=True)
        t0 = time.time()
        subprocess.run([sys.executable, K3_REF, "--header-only", "--out", src], check=True,
                       capture_output=True, timeout=300)
        print("header-only K3 written in %.1f s" % (time.time() - t0))
    repo = hub.add_repo(FileRepo("moonshotai/Kimi-K3", src))
    shards = sorted(n for n in repo.files if n.endswith(".safetensors"))
    check(len(shards) == 96, "96 shards")
    heads = {}
    for n in shards:
        with open(os.path.join(src, n), "rb") as f:
            heads[n] = 8 + struct.unpack("<Q", f.read(8))[0]
    d = os.path.join(WORK, SCENARIO, "k3-pulled")
    shutil.rmtree(d, ignore_errors=True)
    hub.reset()
    p = pull("moonshotai/Kimi-K3", d, "--stream", "--dry-run", "--json", "--jobs", "8", timeout=300)
    check(p.returncode == 0, "pull --stream --dry-run of the real layout exits 0")
    ev = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    plan = [e for e in ev if e.get("event") == "plan"]
    check(len(plan) == 1, "one plan event")
    if plan:
        pl = plan[0]
        fs = {f["path"]: f for f in pl["files"]}
        other = [f for f in fs.values() if not f["path"].endswith(".safetensors")]
        sparse = [n for n in shards if fs[n]["sparse"]]
        # a shard of text tensors only is an ordinary full download (its header included)
        spine = sum(fs[n]["download"] - (0 if fs[n]["sparse"] else heads[n]) for n in shards)
        check(pl["text_prefix"] == "language_model.", "the wrapper's text prefix is found")
        check(all(fs[n]["sparse"] == (fs[n]["experts"] + fs[n]["unused"] > 0) for n in shards)
              and len(sparse) >= 80, "shards holding experts or vision are planned sparse (%d)"
              % len(sparse))
        check(pl["expert_bytes"] == 1446456066048, "routed experts 1,446,456,066,048 B left to "
              "stream (%d)" % pl["expert_bytes"])
        check(pl["unused_bytes"] == 894717952, "vision 894,717,952 B never read (%d)"
              % pl["unused_bytes"])
        check(spine == 113509540864, "the text spine 113,509,540,864 B up front (%d)" % spine)
        check(pl["header_bytes"] == sum(heads[n] for n in sparse), "the sparse shards' headers")
        check(pl["download_bytes"] == spine + sum(f["download"] for f in other),
              "up front = spine + the other files")
        check(spine + pl["expert_bytes"] + pl["unused_bytes"] + sum(heads.values()) ==
              sum(len(repo.files[n]) for n in shards), "spine + experts + vision + headers = the shards")
    served = {n: 0 for n in shards}
    for r in hub.requests():
        if r["path"] in served and r["kind"] == "storage":
            a, b = r["range"][6:].split("-")
            a, b = int(a), int(b) + 1
            check(b <= heads[r["path"]], "%s: only header bytes are read (%d..%d)" % (r["path"], a, b))
            served[r["path"]] += b - a
    check(all(served[n] == heads[n] for n in shards), "each shard's header is read once, nothing else")
    check(not os.path.exists(d), "a dry run writes nothing")
    # the index (59 MB, an LFS file) and the configs, pulled for real
    hub.reset()
    p = pull("moonshotai/Kimi-K3", d, "--include", "*.json", timeout=300)
    check(p.returncode == 0, "pull of the K3 index and configs exits 0")
    idx = os.path.join(d, "model.safetensors.index.json")
    check(os.path.exists(idx) and os.path.getsize(idx) > 50e6 and
          open(idx, "rb").read() == open(os.path.join(src, "model.safetensors.index.json"), "rb").read(),
          "the 59 MB index is published byte-identical (SHA-256 verified)")
    if src.startswith(os.path.join(WORK, SCENARIO)):  # our own copy, not the fixture's
        shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def dspark_repo(target, name):
    """A random DSpark block drafter for `target` (tests/reference/dspark_ckpt.py), served as
    `name`: {path: bytes}."""
    out = os.path.join(WORK, SCENARIO, "dspark-src")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, DSPARK_CKPT, "--target", target, "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    files = {n: open(os.path.join(out, n), "rb").read() for n in sorted(os.listdir(out))}
    hub.add_repo(Repo(name, files))
    return files


def scenario_setup_k3():
    """deltafin setup --stream / --full against the hub: pulls the model and its block drafter
    (Inferact/Kimi-K3-DSpark, served here as a random drafter for the tiny K3) beside it,
    loads both, prints the plan, the admission verdict and the next command; the stream folder
    then runs like the full one, and `run` without --draft drafts with the drafter setup
    recorded in the model folder, the same ids. A drafter the hub does not
    have, or one of another model, is reported and left out; --no-drafter fetches none."""
    src, files = k3_repo("acme/tiny-k3")
    dfiles = dspark_repo(src, "Inferact/Kimi-K3-DSpark")
    rc0, ids0, _, _ = k3_run(src, "full")
    d = fresh("setup-stream")
    dd = os.path.join(os.path.dirname(d), "Kimi-K3-DSpark")
    shutil.rmtree(dd, ignore_errors=True)
    hub.reset()
    p = deltafin(["setup", "--stream", "acme/tiny-k3", "--dir", d, "--cache-budget", "1M",
                  "--progress-interval", "0.2"])
    print(p.stdout)
    check(p.returncode == 0, "setup --stream exits 0")
    check(manifest(d)["mode"] == "stream", "setup --stream pulls in stream mode")
    check("deltafin run --model %s" % d in p.stdout, "setup prints the run command")
    check("admission    ok" in p.stdout and "stream mode" in p.stdout, "setup prints the verdict")
    check("drafter      Inferact/Kimi-K3-DSpark in %s" % dd in p.stdout and
          all(open(os.path.join(dd, n), "rb").read() == b for n, b in dfiles.items()),
          "setup pulls K3's block drafter beside the model, byte-identical")
    check(not shard_gets() or all((a, b) not in layout_ex(files, path)
                                  for path, a, b in get_ranges(shard_gets())),
          "setup fetches no expert")
    hub.reset()
    rc, ids, _, _ = k3_run(d, "setup-stream")
    check(rc == 0 and ids == ids0, "the setup --stream folder runs with the full folder's ids")
    rec = open(os.path.join(d, ".deltafin", "drafter")).read()
    check(rec == os.path.realpath(dd) + "\n", "the model folder's record names the drafter (%r)" % rec)
    p = deltafin(["run", "--model", d, "--stats"] + RUN_ARGS)
    check(p.returncode == 0 and p.stdout.strip() == ids0 and
          "drafter: %s (block drafter `deltafin setup` fetched for this model)" % os.path.realpath(dd)
          in p.stderr, "run without --draft drafts with the drafter setup fetched: the same ids (%s)"
          % p.stderr[-300:])
    p = deltafin(["run", "--model", d, "--no-draft", "--stats"] + RUN_ARGS)
    check(p.returncode == 0 and p.stdout.strip() == ids0 and "drafter:" not in p.stderr,
          "--no-draft: the target alone")
    d2 = fresh("setup-full")
    p = deltafin(["setup", "--full", "acme/tiny-k3", "--dir", d2, "--quiet", "--no-drafter"])
    check(p.returncode == 0 and manifest(d2)["mode"] == "full" and "admission    ok" in p.stdout,
          "setup --full pulls everything")
    check("drafter      none (--no-drafter)" in p.stdout and
          not os.path.exists(os.path.join(d2, ".deltafin", "drafter")),
          "--no-drafter fetches no drafter and records none")
    all_published(d2, files)
    # a drafter the hub does not have, and one made for another model: reported, left out
    p = deltafin(["setup", "--full", "acme/tiny-k3", "--dir", d2, "--quiet", "--drafter",
                  "acme/no-such-drafter", "--retries", "0"])
    check(p.returncode == 0 and "drafter      not fetched (acme/no-such-drafter:" in p.stdout
          and not os.path.exists(os.path.join(d2, ".deltafin", "drafter")),
          "a missing drafter: reported, the model ready alone")
    dspark_repo(os.path.join(FIXTURES, "tiny-ds-bf16"), "acme/other-drafter")  # hidden 64, not 96
    p = deltafin(["setup", "--full", "acme/tiny-k3", "--dir", d2, "--quiet", "--drafter",
                  "acme/other-drafter", "--drafter-dir", os.path.join(WORK, SCENARIO, "other")])
    check(p.returncode == 0 and "does not fit this model:" in p.stdout and
          not os.path.exists(os.path.join(d2, ".deltafin", "drafter")),
          "a drafter of another model: reported, left out (%s)" % p.stdout[-400:])
    p = deltafin(["setup", "acme/tiny-k3", "--dir", d2])
    check(p.returncode == 2 and "--full" in p.stderr, "setup needs --full or --stream")
    p = deltafin(["setup", "--full", "--stream", "--dir", d2])
    check(p.returncode == 2, "not both")
    hub.reset()
    p = deltafin(["setup", "--stream", "--dry-run", "--dir", fresh("setup-default")])
    check(p.returncode == 1 and "moonshotai/Kimi-K3" in p.stderr and
          any("/api/models/moonshotai/Kimi-K3/" in r["url"] for r in hub.requests(kind="api")),
          "setup's default model is moonshotai/Kimi-K3 (asked of HF_ENDPOINT)")
    p = deltafin(["setup", "--help"])
    check(p.returncode == 0 and "Inferact/Kimi-K3-DSpark" in p.stdout,
          "setup --help names K3's drafter")
    p = deltafin(["pull", "acme/tiny-k3", "--drafter", "a/b"])
    check(p.returncode == 2, "pull has no --drafter")


def layout_ex(files, path):
    return k3_layout({path: files[path]})[path][0].values()


SCENARIOS = {n[len("scenario_"):]: f for n, f in globals().items() if n.startswith("scenario_")}
try:
    SCENARIOS[SCENARIO]()
finally:
    hub.close()
if failures:
    print("%d check(s) failed in %s" % (len(failures), SCENARIO))
    sys.exit(1)
print("%s: all checks passed" % SCENARIO)
