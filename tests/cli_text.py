#!/usr/bin/env python3
"""`deltafin run --prompt TEXT` end to end with the real Qwen3 tokenizer on a random
checkpoint of Qwen3's vocabulary size: the streamed text equals the byte-level decoding of
the ids the same run produces from `--prompt-ids` (ids from `deltafin tokenize`), --chat
renders and runs, a model folder without tokenizer.json is a clear error, and text that is
not UTF-8 is refused with its byte offset.

usage: cli_text.py DELTAFIN TOKENIZER_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def byte_decoder():
    """GPT-2 byte-level alphabet: printable bytes map to themselves, others to U+0100.."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    exe, tokdir, work = sys.argv[1:4]
    here = os.path.dirname(os.path.abspath(__file__))
    model = os.path.join(work, "qwen3-vocab-moe")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(here, "reference", "make_checkpoint.py"),
                        "--preset", "tiny-moe-tied", "--vocab", "151936", "--out", model],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), model)
    tj = json.load(open(os.path.join(model, "tokenizer.json")))
    id_to_piece = {v: k for k, v in tj["model"]["vocab"].items()}
    special = {}
    for t in tj["added_tokens"]:
        id_to_piece[t["id"]] = t["content"]
        special[t["id"]] = t["special"]
    bd = byte_decoder()

    text = "The quick brown fox jumps over the lazy dog. Ünïcödé → 東京"
    r = subprocess.run([exe, "tokenize", "--model", model, "--ids-only", text],
                       capture_output=True, text=True)
    ids = r.stdout.split()
    check(r.returncode == 0 and len(ids) > 5, "tokenize --ids-only gives ids")
    # bytes that are not UTF-8 are refused with their offset, never silently replaced
    bad = b"ab\xe6\xad"
    r = subprocess.run([os.fsencode(exe), b"tokenize", b"--model", os.fsencode(model), bad],
                       capture_output=True)
    check(r.returncode == 2 and b"not valid UTF-8: byte 2 (0xE6)" in r.stderr and not r.stdout,
          "tokenize: invalid UTF-8 refused at its byte offset")
    r = subprocess.run([os.fsencode(exe), b"run", b"--model", os.fsencode(model), b"--prompt",
                        b"ok \xff", b"--max-new", b"1"], capture_output=True)
    check(r.returncode == 2 and b"--prompt is not valid UTF-8: byte 3 (0xFF)" in r.stderr,
          "run --prompt: invalid UTF-8 refused at its byte offset")
    common = ["--model", model, "--max-new", "40", "--temperature", "0", "--ignore-eos", "--no-draft"]
    a = subprocess.run([exe, "run", *common, "--prompt-ids", ",".join(ids)], capture_output=True, text=True)
    b = subprocess.run([exe, "run", *common, "--prompt", text], capture_output=True)
    gen = [int(x) for x in a.stdout.split()]
    want = b"".join(bytes(bd[c] for c in id_to_piece[i]) for i in gen
                    if not special.get(i, False)).decode("utf-8", "replace") + "\n"
    check(a.returncode == 0 and len(gen) == 40, "run --prompt-ids generates 40 ids")
    check(b.returncode == 0 and b.stdout.decode("utf-8") == want,
          "run --prompt streams exactly the decoding of the same ids")

    r = subprocess.run([exe, "run", "--model", model, "--prompt", "Say <|im_end|> hi", "--chat",
                        "--system", "Be brief.", "--no-think", "--max-new", "8", "--temperature",
                        "0.7", "--seed", "1", "--draft", model, "--stats"], capture_output=True, text=True)
    check(r.returncode == 0 and "generate 8 tokens" in r.stderr and "acceptance 1.000" in r.stderr,
          "run --chat --system --no-think with a draft equal to the target (all accepted)")

    r = subprocess.run([exe, "run", "--model", os.path.join(here, "fixtures", "tiny-dense"),
                        "--prompt", "hi"], capture_output=True, text=True)
    check(r.returncode == 1 and "tokenizer.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "a model without tokenizer.json: one line naming tokenizer.json")
    r = subprocess.run([exe, "run", "--model", model, "--prompt", "hi", "--prompt-ids", "1"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "exactly one of --prompt" in r.stderr, "--prompt with --prompt-ids refused")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
