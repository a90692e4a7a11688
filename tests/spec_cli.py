#!/usr/bin/env python3
"""Speculative decoding through `deltafin run`: fallbacks and the cluster.

usage: spec_cli.py SCENARIO BUILD_DIR FIXTURES_DIR DRAFTS_DIR WORK_DIR [MODELS_DIR]
SCENARIO:
  fallbacks  with a draft (perturbed tiny-moe-sparse) the greedy ids equal --no-draft's and
             --stats reports the drafting figures; a corrupt draft, a missing draft folder, a
             draft whose tokenizer.json maps ids differently, a draft of another vocabulary
             and a memory reserve the machine cannot keep (DF_DRAFT_MEM_RESERVE) each give
             exit 0, the --no-draft ids and exactly one "drafting off" line; a tokenizer
             differing only in JSON formatting keeps drafting on; seeded sampling with a draft
             is reproducible
  cluster    three df-node processes on 127.0.0.x loopback holding the target's routed
             experts (budgets of 3, 5 and 9 of the 16 pairs): greedy ids with the draft
             (fixed k = 3, and adaptive k) equal the local --no-draft ids and the cluster
             --no-draft ids; the verify batches went through the nodes
  block      models/demo-moe with the shipped block drafter models/demo-dspark (MODELS_DIR) on
             an English prompt: greedy ids identical to --no-draft, adaptive and fixed k = 6,
             with drafted tokens accepted (--stats); the block drafter of another target
             (hidden size 128 against tiny-moe-sparse's) gives exit 0, the --no-draft ids and
             one "drafting off" line; `deltafin serve --draft models/demo-dspark` answers two
             greedy completions at once with the --no-draft run's text, drafted tokens
             accepted (usage.speculative); without --model and --draft, run drafts a raw
             completion with the bundled draft model and a --chat turn with the bundled block
             drafter (--stats says which and why; the --chat text equals --no-draft's); two
             block drafters are a usage error
  text       cross-tokenizer drafting: models/demo-moe with DRAFTS_DIR/demo-swapped (demo-draft
             under a tokenizer with two ids swapped) and with models/demo-xdraft (its own 4k
             tokenizer): `run --stats` text identical to --no-draft, drafted ids accepted, the
             text draft's figures printed; `deltafin serve --draft` with each answers two
             greedy completions at once with the --no-draft run's text, drafted tokens
             accepted (usage.speculative); a draft whose tokenizer has more ids than its model
             rows (DRAFTS_DIR/xdraft-oob) is refused at load with one line, the --no-draft text
  demo_cluster
             models/demo-moe + models/demo-draft (MODELS_DIR) on three loopback nodes: 20
             prompts x 128 tokens in one coordinator process (tests/test_spec_cluster.c),
             ids with the draft identical to the local target-alone ids (those the fixture
             spec_demo_alone wrote to BUILD_DIR/spec-demo-alone.txt, tests/spec_demo_alone.h;
             computed here without it); exit 77 (skipped) while the pair is missing
Readiness is awaited on log lines, never on fixed sleeps.
"""
import json
import os
import struct
import shutil
import socket
import subprocess
import sys

SCEN, BUILD, FIX, DRAFTS, WORK = sys.argv[1:6]
MODELS = sys.argv[6] if len(sys.argv) > 6 else None
DELTAFIN = os.path.join(BUILD, "coordinator", "deltafin")
DFNODE = os.path.join(BUILD, "node", "df-node")
TARGET = os.path.join(FIX, "tiny-moe-sparse")
PROMPT = "400,3,77,1,0,12,5,6,9,100"
DEADLINE = 120.0

failures = []
procs = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(*args, env=None, timeout=180):
    e = dict(os.environ)
    e.pop("DF_DRAFT_MEM_RESERVE", None)
    if env:
        e.update(env)
    r = subprocess.run([DELTAFIN, "run", *args], capture_output=True, text=True, timeout=timeout,
                       env=e)
    return r.returncode, r.stdout.split(), r.stderr


def off_lines(stderr):
    return [ln for ln in stderr.splitlines() if "drafting off" in ln]


def scen_fallbacks():
    common = ["--model", TARGET, "--prompt-ids", PROMPT, "--max-new", "40", "--temperature", "0",
              "--ignore-eos"]
    rc, base, err = run(*common, "--no-draft")
    check(rc == 0 and len(base) == 40, "--no-draft generates 40 ids")
    rc, ids, err = run(*common, "--draft", os.path.join(DRAFTS, "perturbed"), "--stats")
    check(rc == 0 and ids == base, "with the perturbed draft, adaptive k: ids identical")
    print("\n".join("      " + ln for ln in err.splitlines()))
    rc, ids, err = run(*common, "--draft", os.path.join(DRAFTS, "perturbed"), "--fixed-k",
                       "--draft-k", "3", "--stats")
    check(rc == 0 and ids == base, "with the perturbed draft, fixed k=3: ids identical")
    check("draft:" in err and "acceptance" in err and "mean accepted length" in err
          and not off_lines(err), "--stats reports acceptance and mean accepted length")
    print("\n".join("      " + ln for ln in err.splitlines()))
    rc, ids, err = run(*common, "--draft", os.path.join(DRAFTS, "perturbed"), "--fixed-k",
                       "--draft-k", "2", "--stats")
    check(rc == 0 and ids == base and " k=2:" in err, "--fixed-k --draft-k 2: ids identical, k=2 only")

    def fallback(what, draft, want, model=TARGET, env=None):
        args = ["--model", model] + common[2:]
        rc, ids, err = run(*args, "--draft", draft, env=env)
        lines = off_lines(err)
        check(rc == 0 and ids == base, "%s: exit 0 and the --no-draft ids" % what)
        check(len(lines) == 1 and want in lines[0] and "the target runs alone" in lines[0],
              "%s: one log line (%s)" % (what, lines[0] if lines else err.strip()[-200:]))

    fallback("corrupt draft", os.path.join(DRAFTS, "corrupt"), "model.safetensors")
    fallback("missing draft folder", os.path.join(DRAFTS, "no-such-draft"), "no-such-draft")
    fallback("vocabulary mismatch", os.path.join(DRAFTS, "vocab256"), "vocabulary (256 tokens)")
    # a draft with another tokenizer is not refused: it drafts through text
    # (coordinator/generate/text_draft.h), and the ids stay the target's
    rc, ids, err = run("--model", os.path.join(DRAFTS, "target-tok"), *common[2:], "--draft",
                       os.path.join(DRAFTS, "tok-diff"), "--fixed-k", "--stats")
    check(rc == 0 and ids == base and not off_lines(err) and "text draft (its own tokenizer)" in err,
          "tokenizer differs: a cross-tokenizer draft, ids identical (%s)"
          % [ln for ln in err.splitlines() if ln.startswith(("draft:", "text draft"))])
    fallback("memory headroom", os.path.join(DRAFTS, "perturbed"), "memory headroom short",
             env={"DF_DRAFT_MEM_RESERVE": str(1 << 62)})
    rc, ids, err = run("--model", os.path.join(DRAFTS, "target-tok"), *common[2:], "--draft",
                       os.path.join(DRAFTS, "tok-same"), "--fixed-k", "--stats")
    check(rc == 0 and ids == base and "draft:" in err and not off_lines(err),
          "same tokenizer in other JSON formatting: drafting stays on, ids identical")
    samp = ["--model", TARGET, "--prompt-ids", PROMPT, "--max-new", "40", "--temperature", "0.8",
            "--top-p", "0.95", "--ignore-eos", "--draft", os.path.join(DRAFTS, "perturbed")]
    r1, r2, r3 = run(*samp, "--seed", "5"), run(*samp, "--seed", "5"), run(*samp, "--seed", "6")
    r0 = run(*samp[:-2], "--no-draft", "--seed", "5")
    check(r1[0] == 0 and r1[1] == r2[1] and r1[1] != r3[1] and r1[1] == r0[1],
          "seeded sampling with a draft: same seed same ids, the --no-draft ids; other seed other ids")
    serve_rests()


# sampled requests, seeded: request i gets SAMPLED and seed 7 + i (`run --seed 7+i` for want)
SAMPLED = {"temperature": 0.8, "top_p": 0.95, "top_k": 40}


def run_sampled(model, prompt, seed, *extra):
    """`deltafin run` of 40 tokens with SAMPLED and --seed: (rc, stdout, stderr)."""
    r = subprocess.run([DELTAFIN, "run", "--model", model, "--prompt", prompt, "--max-new", "40",
                        "--temperature", str(SAMPLED["temperature"]), "--top-p", str(SAMPLED["top_p"]),
                        "--top-k", str(SAMPLED["top_k"]), "--seed", str(seed), "--ignore-eos", *extra],
                       capture_output=True, text=True, timeout=180)
    return r.returncode, r.stdout, r.stderr


def serve_rests():
    """`serve` with a draft that does not pay (the perturbed draft: acceptance ~0.15): the
    sequence's drafting rests (64 tokens, then 128) and is measured again after each rest,
    instead of stopping for good after its first 8 rounds; the text is the --no-draft one."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from server_util import Server, post
    model = os.path.join(DRAFTS, "target-tok")
    body = {"model": "target-tok", "prompt": [int(x) for x in PROMPT.split(",")], "max_tokens": 240,
            "temperature": 0, "ignore_eos": True}
    got = {}
    for name, args in (("draft", ["--draft", os.path.join(DRAFTS, "perturbed"), "--draft-k", "4"]),
                       ("alone", ["--no-draft"])):
        srv = Server(DELTAFIN, model, "--parallel", "1", *args)
        try:
            got[name] = post(srv.port, "/v1/completions", body)
        finally:
            srv.stop()
    (st, _, b), (st0, _, b0) = got["draft"], got["alone"]
    spec = b.get("usage", {}).get("speculative", {}) if st == 200 else {}
    check(st == 200 and st0 == 200 and b["choices"][0]["text"] == b0["choices"][0]["text"],
          "serve, a draft that does not pay: the --no-draft text")
    # 8 rounds of 4 (32 draft tokens) before each rest: 240 tokens hold three such windows
    # (rests of 64 and 128 tokens between them); stopping for good would give 32
    check(spec.get("draft_tokens") == 96,
          "serve, a draft that does not pay: drafting rests and is measured again (%s)" % spec)


def serve_two(model, args, prompts, want, label, sampled=False):
    """`deltafin serve --model MODEL ARGS` answers the two completions of prompts at once
    (greedy, or SAMPLED with seed 7 + i) with the texts want[i] (a `run` stdout: the text and a
    newline), drafted tokens accepted in each (usage.speculative)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import concurrent.futures
    from server_util import Server, post
    srv = Server(DELTAFIN, model, *args)
    try:
        def complete(i):
            body = {"model": "demo-moe", "prompt": prompts[i], "max_tokens": 40, "temperature": 0,
                    "ignore_eos": True}
            if sampled:
                body.update(SAMPLED, seed=7 + i)
            return post(srv.port, "/v1/completions", body)
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            got = list(ex.map(complete, range(len(prompts))))
        for i, (status, _, body) in enumerate(got):
            text = body["choices"][0]["text"] if status == 200 else str(body)
            spec = body.get("usage", {}).get("speculative", {}) if status == 200 else {}
            check(status == 200 and len(text) > 0 and text == want[i][:-1] and want[i][-1:] == "\n",
                  "%s, request %d: the --no-draft text" % (label, i))
            check(spec.get("accepted_tokens", 0) > 0,
                  "%s, request %d: drafted tokens accepted (%s)" % (label, i, spec))
    finally:
        srv.stop()


def scen_block():
    demo, dspark = os.path.join(MODELS, "demo-moe"), os.path.join(MODELS, "demo-dspark")
    common = ["--model", demo, "--prompt", "The history of the county begins with",
              "--max-new", "40", "--temperature", "0", "--ignore-eos"]
    rc, base, err = run(*common, "--no-draft")
    check(rc == 0 and len(base) > 0, "--no-draft generates text")
    for extra in ([], ["--fixed-k", "--draft-k", "6"]):
        rc, ids, err = run(*common, "--draft", dspark, "--stats", *extra)
        st = [ln for ln in err.splitlines() if ln.startswith("draft:")]
        acc = float(st[0].split("acceptance ")[1].split(",")[0]) if st else 0.0
        check(rc == 0 and ids == base and not off_lines(err),
              "block drafter %s: text identical to --no-draft" % (" ".join(extra) or "adaptive k"))
        check(acc > 0, "block drafter %s: drafted tokens accepted (%s)"
              % (" ".join(extra) or "adaptive k", st[0] if st else err.strip()[-200:]))
    # the server: two concurrent greedy completions, each the text `run` printed
    prompts = ["The history of the county begins with", "In the morning the committee"]
    want = []
    for p in prompts:
        r = subprocess.run([DELTAFIN, "run", "--model", demo, "--prompt", p, "--max-new", "40",
                            "--temperature", "0", "--ignore-eos", "--no-draft"],
                           capture_output=True, text=True, timeout=180)
        want.append(r.stdout)
    serve_two(demo, ["--draft", dspark, "--parallel", "2", "--draft-max-seqs", "2", "--draft-k", "6"],
              prompts, want, "serve with the block drafter")
    # sampled and seeded: every drafter gives the ids of the target alone with that seed
    # (drafter-invariant speculative sampling, coordinator/generate/spec.h), in run and serve
    want_s = [run_sampled(demo, p, 7 + i, "--no-draft")[1] for i, p in enumerate(prompts)]
    check(want_s[0] != run_sampled(demo, prompts[0], 9, "--no-draft")[1],
          "sampled: another seed gives another text")
    for name, draft in (("demo-draft", os.path.join(MODELS, "demo-draft")), ("demo-dspark", dspark),
                        ("demo-xdraft", os.path.join(MODELS, "demo-xdraft"))):
        for extra in ([], ["--fixed-k", "--draft-k", "3"]):
            rc, out, err = run_sampled(demo, prompts[0], 7, "--draft", draft, "--stats", *extra)
            st = [ln for ln in err.splitlines() if ln.startswith(("draft:", "text draft"))]
            check(rc == 0 and out == want_s[0] and any("acceptance" in ln for ln in st),
                  "sampled, seeded, run --draft %s %s: the --no-draft text (%s)"
                  % (name, " ".join(extra) or "(adaptive k)", st[:1]))
        serve_two(demo, ["--draft", draft, "--parallel", "2", "--draft-max-seqs", "2"], prompts,
                  want_s, "serve --draft %s, sampled and seeded" % name, sampled=True)
    # the automatic choice with the bundled drafters (no --model, no --draft)
    auto = ["--max-new", "24", "--temperature", "0", "--ignore-eos", "--stats"]
    rc, ids, err = run("--prompt", "The history of the county begins with", *auto)
    chosen = [ln for ln in err.splitlines() if ln.startswith("drafter:")]
    check(rc == 0 and len(chosen) == 1 and "demo-draft (draft model for a raw completion)"
          in chosen[0], "bundled drafters, raw completion: the draft model (%s)" % chosen)
    chat = ["--chat", "--prompt", "Tell me about the county", *auto]
    rc, base, err0 = run(*chat, "--no-draft")
    rc, ids, err = run(*chat)
    chosen = [ln for ln in err.splitlines() if ln.startswith("drafter:")]
    check(rc == 0 and ids == base and len(chosen) == 1
          and "demo-dspark (block drafter for a chat turn)" in chosen[0]
          and not [ln for ln in err0.splitlines() if ln.startswith("drafter:")],
          "bundled drafters, --chat: the block drafter, the --no-draft text (%s)" % chosen)
    rc, _, err = run("--prompt", "x", "--draft", dspark, "--draft", dspark)
    check(rc == 2 and "both block drafters" in err, "two block drafters: usage error (%s)"
          % err.strip()[-160:])
    args = ["--model", TARGET, "--prompt-ids", PROMPT, "--max-new", "40", "--temperature", "0",
            "--ignore-eos"]
    rc, base, err = run(*args, "--no-draft")
    rc, ids, err = run(*args, "--draft", dspark)
    lines = off_lines(err)
    check(rc == 0 and ids == base and len(lines) == 1 and "the target runs alone" in lines[0],
          "block drafter of another target: --no-draft ids and one line (%s)"
          % (lines[0] if lines else err.strip()[-200:]))


# ---- cluster ----------------------------------------------------------------------------


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def spawn(args, log, **kw):
    f = open(log, "ab")
    p = subprocess.Popen(args, stdout=kw.pop("stdout", f), stderr=f, **kw)
    procs.append(p)
    return p


def token(state):
    r = subprocess.run([DELTAFIN, "cluster", "token", "--state-dir", state, "--reusable"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def pair_bytes(model):
    """Bytes of one routed (layer, expert) pair of a qwen3_moe checkpoint (any shard)."""
    import json
    import struct
    names = [n for n in os.listdir(model) if n.endswith(".safetensors")]
    for n in names:
        with open(os.path.join(model, n), "rb") as f:
            hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        keys = [k for k in hdr if ".mlp.experts.0." in k]
        if keys:
            layer = min(int(k.split(".")[2]) for k in keys)
            pre = "model.layers.%d.mlp.experts.0." % layer
            got = [v["data_offsets"][1] - v["data_offsets"][0] for k, v in hdr.items()
                   if k.startswith(pre)]
            if len(got) == 3:
                return sum(got)
    raise SystemExit("no routed experts in " + model)


def cluster_compare(model, draft, prompts, max_new, n_pairs):
    """Three nodes with 3/16, 5/16, 9/16 of the pairs: local --no-draft vs cluster runs."""
    pb = pair_bytes(model)
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state)
    for i, frac in enumerate([3, 5, 9]):
        budget = max(1, n_pairs * frac // 16) * pb
        spawn([DFNODE, "join", "127.0.0.1:%d" % port, "--state-dir", os.path.join(WORK, "n%d" % i),
               "--memory", str(budget), "--name", "s%d" % i, "--threads", "1", "--token", tok,
               "--model-dir", model], os.path.join(WORK, "n%d.log" % i))
    base = ["--model", model, "--max-new", str(max_new), "--temperature", "0", "--ignore-eos"]
    clus = ["--cluster", "--cluster-bind", "127.0.0.1", "--cluster-port", str(port),
            "--state-dir", state, "--cluster-nodes", "3", "--cluster-wait", "90"]
    for pi, prompt in enumerate(prompts):
        rc, local, err = run(*base, "--prompt-ids", prompt, "--no-draft", timeout=600)
        check(rc == 0 and len(local) == max_new, "prompt %d: local --no-draft, %d ids" % (pi, max_new))
        variants = [("cluster --no-draft", ["--no-draft"]),
                    ("cluster, draft, fixed k=3", ["--draft", draft, "--fixed-k", "--draft-k", "3"]),
                    ("cluster, draft, adaptive k", ["--draft", draft])]
        if pi > 0:
            variants = variants[1:]
        for what, extra in variants:
            rc, ids, err = run(*base, "--prompt-ids", prompt, *clus, *extra, "--stats", timeout=600)
            check(rc == 0 and ids == local, "prompt %d, %s: ids identical to local" % (pi, what))
            if "draft" in extra:
                rounds = [ln for ln in err.splitlines() if ln.startswith("draft:")]
                check(bool(rounds) and "acceptance" in rounds[0],
                      "prompt %d, %s: drafted (%s)" % (pi, what, rounds[0] if rounds else "no rounds"))
            cl = [ln for ln in err.splitlines() if "local," in ln or "round trip" in ln]
            if cl:
                print("      " + cl[-1])


def scen_text():
    demo = os.path.join(MODELS, "demo-moe")
    prompts = ["The history of the county begins with", "In the morning the committee"]
    want = []
    for p in prompts:
        r = subprocess.run([DELTAFIN, "run", "--model", demo, "--prompt", p, "--max-new", "40",
                            "--temperature", "0", "--ignore-eos", "--no-draft"],
                           capture_output=True, text=True, timeout=180)
        want.append(r.stdout)
    for name, draft in (("demo-swapped", os.path.join(DRAFTS, "demo-swapped")),
                        ("demo-xdraft", os.path.join(MODELS, "demo-xdraft"))):
        r = subprocess.run([DELTAFIN, "run", "--model", demo, "--prompt", prompts[0], "--max-new",
                            "40", "--temperature", "0", "--ignore-eos", "--draft", draft,
                            "--fixed-k", "--stats"], capture_output=True, text=True, timeout=180)
        st = [ln for ln in r.stderr.splitlines() if ln.startswith(("draft:", "text draft"))]
        acc = float(st[0].split("acceptance ")[1].split(",")[0]) if st and "acceptance" in st[0] else 0
        check(r.returncode == 0 and r.stdout == want[0] and not off_lines(r.stderr),
              "run --draft %s: the --no-draft text" % name)
        check(acc > 0 and any(ln.startswith("text draft (its own tokenizer)") for ln in st),
              "run --draft %s: drafted ids accepted, the text draft's figures (%s)" % (name, st))
        serve_two(demo, ["--draft", draft, "--parallel", "2", "--draft-max-seqs", "2"], prompts,
                  want, "serve --draft %s" % name)
    r = subprocess.run([DELTAFIN, "run", "--model", demo, "--prompt", prompts[0], "--max-new", "40",
                        "--temperature", "0", "--ignore-eos", "--draft",
                        os.path.join(DRAFTS, "xdraft-oob")], capture_output=True, text=True,
                       timeout=180)
    lines = off_lines(r.stderr)
    check(r.returncode == 0 and r.stdout == want[0] and len(lines) == 1
          and "its tokenizer has 5001 ids, its model (config.json vocab_size) 4096 rows" in lines[0],
          "a draft tokenizer with ids past its model's rows: refused at load, one line (%s)" % lines)
    r = subprocess.run([DELTAFIN, "run", "--model", demo, "--prompt", prompts[0], "--max-new", "40",
                        "--temperature", "0", "--ignore-eos", "--no-draft", "--draft",
                        os.path.join(MODELS, "demo-xdraft")], capture_output=True, text=True,
                       timeout=180)
    check(r.returncode == 0 and r.stdout == want[0] and r.stderr.strip() ==
          "deltafin run: --no-draft: the target runs alone; --draft %s is not used"
          % os.path.join(MODELS, "demo-xdraft"), "--no-draft with --draft: one line, the target alone")
    serve_broken_text_draft(demo, prompts, want)


def nan_xdraft():
    """models/demo-xdraft with model.norm.weight all NaN (its forwards fail), in WORK."""
    src, d = os.path.join(MODELS, "demo-xdraft"), os.path.join(WORK, "xdraft-nan")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in os.listdir(src):
        if f != "model.safetensors":
            os.symlink(os.path.join(src, f), os.path.join(d, f))
    data = bytearray(open(os.path.join(src, "model.safetensors"), "rb").read())
    n = struct.unpack("<Q", data[:8])[0]
    info = json.loads(data[8:8 + n])["model.norm.weight"]
    a, b = (8 + n + o for o in info["data_offsets"])
    nan = {"BF16": b"\xc0\x7f", "F32": b"\x00\x00\xc0\x7f"}[info["dtype"]]
    data[a:b] = nan * ((b - a) // len(nan))
    open(os.path.join(d, "model.safetensors"), "wb").write(data)
    return d


def serve_broken_text_draft(demo, prompts, want):
    """serve with a text draft whose forwards fail: drafting with it goes off for every request
    with one log line, /metrics says so, and the answers are the --no-draft texts."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from server_util import Server, metrics, post
    srv = Server(DELTAFIN, demo, "--draft", nan_xdraft(), "--parallel", "2")
    try:
        for i, p in enumerate(prompts):
            status, _, body = post(srv.port, "/v1/completions",
                                   {"model": "demo-moe", "prompt": p, "max_tokens": 40,
                                    "temperature": 0, "ignore_eos": True})
            check(status == 200 and body["choices"][0]["text"] == want[i][:-1],
                  "serve with a failing text draft, request %d: the --no-draft text" % i)
        check(metrics(srv.port).get("deltafin_draft_enabled") == 0,
              "serve with a failing text draft: /metrics deltafin_draft_enabled 0")
    finally:
        srv.stop()
    off = [ln for ln in srv.log if "drafting with the draft model off: text draft:" in ln]
    check(len(off) == 1, "serve with a failing text draft: one log line (%s)" % off)


def scen_cluster():
    cluster_compare(TARGET, os.path.join(DRAFTS, "perturbed"), [PROMPT, "7,7,7,7,7,7"], 48, 16)


DEMO_PROMPTS = [
    "The history of the city begins with", "She opened the letter and read",
    "In the morning the market was", "The committee decided that the new rules",
    "He had never seen so many people", "The president said on Tuesday that",
    "After the war, the family moved to", "The water in the lake was cold and",
    "It was the first time that the team", "The old man looked at the boy and said",
    "Scientists have found that the", "The church stood at the end of a long road",
    "When the music stopped, everyone", "Most of the students in the class",
    "The report shows that the cost of", "There was a knock at the door, and",
    "The governor announced a plan to", "In the spring of that year the farmers",
    "Her voice was soft, but", "The book tells the story of a young"]


def scen_demo_cluster():
    """20 prompts x 128 tokens in one coordinator process (tests/test_spec_cluster.c): local
    target-alone ids, then the same prompts with the draft over three loopback nodes."""
    model, draft = os.path.join(MODELS, "demo-moe"), os.path.join(MODELS, "demo-draft")
    if not (os.path.exists(os.path.join(model, "config.json"))
            and os.path.exists(os.path.join(draft, "config.json"))):
        print("skipped: %s or %s is missing" % (model, draft))
        sys.exit(77)
    import json
    cfg = json.load(open(os.path.join(model, "config.json")))
    moe_layers = [l for l in range(cfg["num_hidden_layers"])
                  if l not in cfg.get("mlp_only_layers", [])
                  and (l + 1) % cfg.get("decoder_sparse_step", 1) == 0]
    n_pairs = len(moe_layers) * cfg["num_experts"]
    pb = pair_bytes(model)
    port, state = free_port(), os.path.join(WORK, "coord")
    tok = token(state)
    for i, frac in enumerate([3, 5, 9]):
        budget = max(1, n_pairs * frac // 16) * pb
        spawn([DFNODE, "join", "127.0.0.1:%d" % port, "--state-dir", os.path.join(WORK, "n%d" % i),
               "--memory", str(budget), "--name", "s%d" % i, "--threads", "1", "--token", tok,
               "--model-dir", model], os.path.join(WORK, "n%d.log" % i))
    exe = os.path.join(BUILD, "tests", "test_spec_cluster")
    alone = os.path.join(BUILD, "spec-demo-alone.txt")  # the fixture spec_demo_alone's
    r = subprocess.run([exe, model, draft, "128", str(port), state, "3"]
                       + ([alone] if os.path.exists(alone) else []),
                       input="\n".join(DEMO_PROMPTS) + "\n", capture_output=True, text=True,
                       timeout=1100)
    print("\n".join("      " + ln for ln in r.stdout.splitlines() + r.stderr.splitlines()))
    check(r.returncode == 0 and r.stdout.count("identical to local") == len(DEMO_PROMPTS) + 2,
          "demo pair, 20 prompts x 128 tokens, three nodes: ids with the draft identical to "
          "the local target-alone ids")
    check(" 0 local," in r.stderr, "every routed expert ran on the nodes")


def main():
    if os.path.isdir(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    try:
        {"fallbacks": scen_fallbacks, "cluster": scen_cluster, "block": scen_block,
         "demo_cluster": scen_demo_cluster, "text": scen_text}[SCEN]()
    finally:
        for q in procs:
            if q.poll() is None:
                q.terminate()
        for q in procs:
            try:
                q.wait(timeout=10)
            except subprocess.TimeoutExpired:
                q.kill()
    if failures:
        print("%d check(s) failed; logs in %s" % (len(failures), WORK))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
