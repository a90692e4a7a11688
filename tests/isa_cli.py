#!/usr/bin/env python3
"""Every instruction set the CPU has gives the same bytes, end to end: `deltafin run` with
DF_ISA=scalar, avx2 and avx512 (each capped at what the CPU has) prints the same greedy ids
and writes the same --logits-out bytes, on a Qwen3-MoE, a DeepSeek-V3 FP8, a Kimi Linear and
a Kimi K3 (MXFP4 experts) fixture; an unknown DF_ISA value is reported on stderr and ignored.

usage: isa_cli.py DELTAFIN FIXTURES WORK_DIR
"""
import os
import subprocess
import sys

MODELS = ["tiny-moe-sparse", "tiny-ds-fp8", "tiny-kl-mixed", "tiny-k3"]
PROMPT = "3,17,5,99,42,7,8,1,64,33,2,11"


def run(exe, model, isa, out):
    env = dict(os.environ, DF_ISA=isa)
    p = subprocess.run([exe, "run", "--model", model, "--prompt-ids", PROMPT, "--max-new", "12",
                        "--temperature", "0", "--ignore-eos", "--logits-out", out],
                       capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        sys.exit(f"DF_ISA={isa} {model}: exit {p.returncode}: {p.stderr.strip()}")
    with open(out, "rb") as f:
        return p.stdout, p.stderr, f.read()


def main():
    exe, fixtures, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    bad = 0
    for name in MODELS:
        model = os.path.join(fixtures, name)
        runs = {isa: run(exe, model, isa, os.path.join(work, f"{name}.{isa}.f32"))
                for isa in ("scalar", "avx2", "avx512")}
        ref_out, _, ref_bytes = runs["scalar"]
        if len(ref_bytes) == 0 or not ref_out.strip():
            sys.exit(f"{name}: no ids or no logits on the scalar path")
        for isa in ("avx2", "avx512"):
            out, _, b = runs[isa]
            if out != ref_out:
                print(f"FAIL {name}: DF_ISA={isa} ids {out.strip()!r} != scalar {ref_out.strip()!r}")
                bad += 1
            if b != ref_bytes:
                diff = next(i for i in range(min(len(b), len(ref_bytes))) if b[i] != ref_bytes[i]) \
                    if len(b) == len(ref_bytes) else -1
                print(f"FAIL {name}: DF_ISA={isa} logits differ from scalar (first byte {diff})")
                bad += 1
        print(f"ok {name}: {len(ref_bytes)} logit bytes equal on scalar, avx2, avx512")
    _, err, _ = run(exe, os.path.join(fixtures, MODELS[0]), "sse9", os.path.join(work, "bad.f32"))
    if "DF_ISA=sse9 ignored (expected scalar, avx2 or avx512)" not in err:
        print(f"FAIL unknown DF_ISA not reported: {err!r}")
        bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
