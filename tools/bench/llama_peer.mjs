// tools/bench/llama_peer.mjs — the bench's fallback llama.cpp peer: times decode and prefill of
// a GGUF file through node-llama-cpp's prebuilt llama.cpp (CPU only), on token ids, the way
// llama-bench does (prefill: one batch of N ids into an empty context; decode: N greedy
// single-token steps after a one-token prompt).
//
//   node llama_peer.mjs --nlc DIR --model FILE.gguf [--threads 2] [--prefill 128]
//                       [--decode 32] [--repeat 1] [--vocab 4112] [--ids 1,2,3 --greedy N]
//
// --nlc: the folder whose node_modules holds node-llama-cpp (tools/bench/suite.py installs the
// pinned version there). Prints one JSON object on stdout: peer, llama.cpp release, build
// type, system info, threads, and per repeat prefill_s / decode_s; with --ids, the greedy
// continuation of those ids (N tokens), for checking that the peer reads the same model.
// Exit status 2 with a message on bad arguments or a model it cannot load.
import { createRequire } from "node:module";
import path from "node:path";
import fs from "node:fs";

function args(argv) {
  const a = { threads: 2, prefill: 128, decode: 32, repeat: 1, greedy: 0, vocab: 4112 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, "");
    const v = argv[++i];
    if (v === undefined) throw new Error(`--${k} needs a value`);
    a[k] = ["model", "nlc", "ids"].includes(k) ? v : Number(v);
    if (!["model", "nlc", "ids", "threads", "prefill", "decode", "repeat", "greedy", "vocab"].includes(k))
      throw new Error(`unknown option --${k}`);
    if (typeof a[k] === "number" && !(Number.isInteger(a[k]) && a[k] >= 0))
      throw new Error(`--${k} must be a non-negative integer (got ${v})`);
  }
  if (!a.model || !a.nlc) throw new Error("--model FILE.gguf and --nlc DIR are required");
  if (a.vocab < 32) throw new Error("--vocab must be at least 32");
  return a;
}

async function main() {
  let a;
  try {
    a = args(process.argv);
  } catch (e) {
    process.stderr.write(`llama_peer: ${e.message}\n`);
    process.exit(2);
  }
  if (!fs.existsSync(a.model)) {
    process.stderr.write(`llama_peer: ${a.model}: no such file\n`);
    process.exit(2);
  }
  const require = createRequire(path.join(path.resolve(a.nlc), "package.json"));
  const entry = require.resolve("node-llama-cpp");
  const nlc = await import(entry);
  const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8"));
  const llama = await nlc.getLlama({ gpu: false, build: "never", logLevel: "error", maxThreads: a.threads });
  const model = await llama.loadModel({ modelPath: a.model });
  const nCtx = Math.max(a.prefill, a.decode + 1, 16) + 16;
  const ctx = await model.createContext({
    contextSize: nCtx, batchSize: Math.max(a.prefill, 1), threads: { ideal: a.threads, min: a.threads },
    sequences: 1,
  });
  const seq = ctx.getSequence();
  // ids drawn from [16, min(vocab, 4112)): past the placeholder vocabulary's special ids
  const span = Math.min(a.vocab, 4112) - 16;
  const ids = (n, seed) => Array.from({ length: n }, (_, i) => 16 + ((seed * 7919 + i * 104729) % span));
  const out = {
    peer: `node-llama-cpp ${pkg.version}`, llama_cpp_release: llama.llamaCppRelease,
    build_type: llama.buildType, system_info: llama.systemInfo, threads: a.threads, runs: [],
  };
  const now = () => Number(process.hrtime.bigint()) / 1e9;
  for (let r = 0; r < a.repeat; r++) {
    const run = {};
    if (a.prefill > 0) {
      await seq.clearHistory();
      const t0 = now();
      await seq.evaluateWithoutGeneratingNewTokens(ids(a.prefill, r + 1));
      run.prefill_s = now() - t0;
    }
    if (a.decode > 0) {
      await seq.clearHistory();
      let n = 0;
      let t0 = 0;
      // the first yielded token ends the one-token prompt's forward; time the next `decode`
      for await (const _ of seq.evaluate(ids(1, r + 3), { temperature: 0 })) {
        if (n === 0) t0 = now();
        if (++n > a.decode) break;
      }
      run.decode_s = now() - t0;
    }
    out.runs.push(run);
  }
  if (a.ids) {
    const prompt = a.ids.split(",").map(Number);
    await seq.clearHistory();
    const got = [];
    for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
      got.push(t);
      if (got.length >= a.greedy) break;
    }
    out.greedy = got;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  await ctx.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  process.stderr.write(`llama_peer: ${e && e.message ? e.message : e}\n`);
  process.exit(2);
});
