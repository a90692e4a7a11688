// Helpers shared by the Node.js tests of `deltafin serve` (server_openai.js, server_tools.js):
// the official `openai` package from tools/node_modules, check() with its failure list, and a
// server started on a free port.
'use strict';
const path = require('path');
const { spawn } = require('child_process');

// The OpenAI class, or exit 77 (ctest: skipped) when the package is not installed.
function openaiClass(tools) {
  let mod;
  try {
    mod = require(path.resolve(tools, 'node_modules', 'openai'));
  } catch (e) {
    console.log(`SKIP: the openai npm package is not installed in ${tools} (run tools/install-deps.sh)`);
    process.exit(77);
  }
  return mod.OpenAI || mod.default || mod;
}

const failures = [];
function check(cond, what) {
  console.log((cond ? 'ok    ' : 'FAIL  ') + what);
  if (!cond) failures.push(what);
}

// Exit 1 with the failures counted, or print the success line.
function finish() {
  if (failures.length) {
    console.log(`${failures.length} check(s) failed`);
    process.exit(1);
  }
  console.log('all checks passed');
}

// `deltafin serve --port 0 ARGS...` without DELTAFIN_API_KEY; resolves to the process with
// .port set once it prints its `listening on` line.
function startServer(exe, args) {
  return new Promise((resolve, reject) => {
    const env = { ...process.env };
    delete env.DELTAFIN_API_KEY;
    const p = spawn(exe, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env });
    let buf = '';
    const timer = setTimeout(() => { p.kill(); reject(new Error('server did not start: ' + buf)); }, 120000);
    p.stderr.on('data', (d) => {
      buf += d.toString();
      const m = buf.match(/listening on http:\/\/[^ ]*:(\d+) /);
      if (m && !p.port) {
        p.port = Number(m[1]);
        clearTimeout(timer);
        resolve(p);
      }
    });
    p.on('exit', (code) => { if (!p.port) reject(new Error(`server exited (${code}): ${buf}`)); });
  });
}

module.exports = { openaiClass, check, failures, finish, startServer };
