#!/usr/bin/env python3
"""The Debian package (tools/packaging/package.cmake) built, installed into a clean Debian 12 root
and run there, away from the source and build trees.

usage: package_deb.py BUILD_DIR SOURCE_DIR WORK_DIR

1. `cpack -G DEB` in BUILD_DIR writes WORK_DIR/pkg/deltafin_<version>_<arch>.deb; its control
   data (name, Depends from dpkg-shlibdeps, conffiles, maintainer scripts) and file list are
   checked, and the man pages are rendered with warnings on (`man --warnings`).
2. A minimal Debian 12 root (`debootstrap --variant=minbase --include=systemd bookworm`, from
   $DF_DEBIAN_MIRROR, default http://deb.debian.org/debian) is made once and cached in
   BUILD_DIR/package-test/ with the .debs apt downloads into it, so a rerun needs no network.
   Each run copies it afresh to WORK_DIR/root and, in a private mount namespace (proc, sys
   and dev bound in, all gone when the test ends), runs `apt-get install
   --no-install-recommends ./deltafin_*.deb` there: the Depends resolve to Debian packages
   and suffice to run both binaries.
3. In the root: `systemd-analyze verify` on both units; the system user deltafin, its 0700
   /var/lib/deltafin and the 0600 API key; then, as that user, `deltafin run` on the bundled
   demo pair (no --model: the installed copy in /usr/share/deltafin/models, the source tree
   not being there) with a fixed prompt, seed and draft length, whose text must equal the
   build tree's binary's byte for byte, and `deltafin tokenize` likewise; each unit's
   ExecStart= as systemd would expand it from the shipped /etc/deltafin files: df-node with a
   join token (it pins the coordinator in /var/lib/deltafin/node, which the unit's
   ConditionPathExists= looks for, and stops with 0 on SIGTERM) and deltafin serve (/health,
   /v1/models 401 without the generated key and 200 with it, 0 on SIGTERM).
4. Reinstalling the same .deb works (postinst run twice); `apt-get purge` removes the files,
   /var/lib/deltafin, /etc/deltafin and keeps the user.

Step 1 runs as the caller; steps 2 to 4 need root (debootstrap, chroot, mounts): the script
re-runs itself with `sudo -n` when it can, and else reports the test skipped (77) saying so.
Needs debootstrap, dpkg-dev and man-db (tools/install-deps.sh), and the Debian mirror on the
first run only. After a success the root (with ~1 GB of dependencies) is deleted; after a
failure WORK_DIR/root and WORK_DIR/upper stay for a look.
Prints one ok/FAIL line per check and the time of each step; exit 0 when all pass.
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SKIP = 77
PROMPT = "The committee reported that the new school"
RUN_ARGS = ["--max-new", "32", "--seed", "1234", "--fixed-k", "--draft-k", "3"]
TOKENIZE_TEXT = "Hello, world: the Brown corpus"
SUITE = "bookworm"
failures = []
t_start = float(os.environ.setdefault("DF_PKG_TEST_T0", str(time.time())))


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def step(what, t0):
    print("time  %-44s %6.1f s" % (what, time.monotonic() - t0), flush=True)


def sh(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, **kw)


def fatal(msg):
    print("FAIL  " + msg, flush=True)
    sys.exit(1)


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    build, source, work = (os.path.abspath(a) for a in sys.argv[1:4])
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps", "debootstrap", "chroot", "man"):
        if not shutil.which(tool):
            fatal("%s is not installed (tools/install-deps.sh installs it)" % tool)
    deltafin = os.path.join(build, "coordinator", "deltafin")
    version = sh([deltafin, "--version"]).stdout.split()[-1]
    arch = sh(["dpkg", "--print-architecture"]).stdout.strip()
    pkgdir = os.path.join(work, "pkg")
    deb = os.path.join(pkgdir, "deltafin_%s_%s.deb" % (version, arch))
    # Step 1 runs as the caller (files cpack writes in the build tree stay theirs); the rest
    # as root, in a private mount namespace: every mount below ends with this process.
    if os.environ.get("DF_PKG_TEST_STEP1") != "done":
        if package(build, source, work, version, arch, pkgdir, deb) != 0:
            return 1
        os.environ["DF_PKG_TEST_STEP1"] = "done"
    if os.geteuid() != 0:
        if shutil.which("sudo") and sh(["sudo", "-n", "true"]).returncode == 0:
            os.execvp("sudo", ["sudo", "-n", "--preserve-env=DF_DEBIAN_MIRROR,DF_PKG_TEST_STEP1,"
                               "DF_PKG_TEST_T0", sys.executable, *sys.argv])
        print("SKIP: installing the package needs root (debootstrap, chroot, mounts), and "
              "sudo -n is not available: run ctest -L package as root")
        return SKIP
    if os.environ.get("DF_PKG_TEST_NS") != "1":
        os.environ["DF_PKG_TEST_NS"] = "1"
        os.execvp("unshare", ["unshare", "--mount", "--propagation", "private",
                              sys.executable, *sys.argv])
    return install(build, source, work, pkgdir, deb)


def package(build, source, work, version, arch, pkgdir, deb):
    """Step 1: cpack, the control data, the file list, the man pages."""
    t0 = time.monotonic()
    shutil.rmtree(pkgdir, ignore_errors=True)
    os.makedirs(pkgdir)
    p = sh(["cpack", "-G", "DEB", "-B", pkgdir], cwd=build)
    if not check(p.returncode == 0 and os.path.exists(deb),
                 "cpack -G DEB wrote %s" % os.path.basename(deb)):
        print(p.stdout[-3000:], p.stderr[-3000:])
        return 1
    step("cpack -G DEB", t0)
    info = sh(["dpkg-deb", "-f", deb]).stdout
    fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", info, re.M))
    print("      Depends: " + fields.get("Depends", ""))
    deps = [d.strip().split()[0] for d in fields.get("Depends", "").split(",") if d.strip()]
    check(fields.get("Package") == "deltafin" and fields.get("Version") == version and
          fields.get("Architecture") == arch, "control: Package deltafin, Version %s, "
          "Architecture %s" % (version, arch))
    for want in ("libc6", "libtorch1.13", "libzmq5", "libjansson4", "libmicrohttpd12",
                 "libcurl4", "adduser"):
        check(want in deps, "Depends names %s" % want)
    # every dependency is a Debian package name (no path or a wheel's soname slipped in)
    check(all(re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", d) for d in deps) and
          not any(d.startswith(("libtorch_", "libc10", "libcudart")) for d in deps),
          "Depends holds Debian package names only")
    ctl = os.path.join(work, "control")
    shutil.rmtree(ctl, ignore_errors=True)
    sh(["dpkg-deb", "-e", deb, ctl])
    conffiles = open(os.path.join(ctl, "conffiles")).read().split()
    check(conffiles == ["/etc/deltafin/df-node.conf", "/etc/deltafin/serve.conf"],
          "conffiles: /etc/deltafin/df-node.conf and serve.conf")
    for s in ("postinst", "prerm", "postrm"):
        check(os.access(os.path.join(ctl, s), os.X_OK), "maintainer script %s (0755)" % s)
    listing = sh(["dpkg-deb", "-c", deb]).stdout
    files = {ln.split()[-1].lstrip(".") for ln in listing.splitlines() if ln.strip()}
    want_files = ["/usr/bin/deltafin", "/usr/bin/df-node",
                  "/usr/share/man/man1/deltafin.1.gz", "/usr/share/man/man1/df-node.1.gz",
                  "/usr/share/doc/deltafin/copyright", "/usr/share/doc/deltafin/changelog.gz",
                  "/usr/share/doc/deltafin/README.md.gz",
                  "/usr/share/doc/deltafin/docs/CLUSTER.md.gz",
                  "/lib/systemd/system/df-node.service",
                  "/lib/systemd/system/deltafin-serve.service",
                  "/etc/deltafin/df-node.conf", "/etc/deltafin/serve.conf"]
    for m in ("demo-moe", "demo-draft", "demo-dspark"):
        for f in sorted(os.listdir(os.path.join(source, "models", m))):
            want_files.append("/usr/share/deltafin/models/%s/%s" % (m, f))
    missing = [f for f in want_files if f not in files]
    check(not missing, "the package holds %d expected files%s" % (
        len(want_files), (": missing " + ", ".join(missing)) if missing else ""))
    check(not any(f.startswith(("/usr/local", "/tmp", "/work", "/root")) or build in f
                  for f in files), "no file outside the Debian layout")
    ex = os.path.join(work, "extract")
    shutil.rmtree(ex, ignore_errors=True)
    sh(["dpkg-deb", "-x", deb, ex])
    for page in ("deltafin", "df-node"):
        r = sh(["man", "--warnings", "-E", "UTF-8", "-l",
                os.path.join(ex, "usr/share/man/man1/%s.1.gz" % page)],
               env=dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MANPAGER="cat",
                        PAGER="cat"))
        check(r.returncode == 0 and not r.stderr.strip() and "SYNOPSIS" in r.stdout,
              "man %s renders without warnings%s" % (page, (": " + r.stderr.strip()[:300])
                                                      if r.stderr.strip() else ""))

    return 1 if failures else 0


def install(build, source, work, pkgdir, deb):
    """Steps 2 to 4, as root: the clean root, the installed package, reinstall and purge."""
    deltafin = os.path.join(build, "coordinator", "deltafin")
    ex = os.path.join(work, "extract")
    # ---- 2. a clean Debian 12 root ---------------------------------------------------------
    t0 = time.monotonic()
    cache = os.path.join(build, "package-test")
    base = os.path.join(cache, SUITE + "-base")
    archives = os.path.join(cache, "apt-archives")
    os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
    if not os.path.exists(os.path.join(base, ".df-complete")):
        mirror = os.environ.get("DF_DEBIAN_MIRROR", "http://deb.debian.org/debian")
        tmp = base + ".new"
        shutil.rmtree(tmp, ignore_errors=True)
        print("      bootstrapping %s from %s into %s (once; cached)" % (SUITE, mirror, base),
              flush=True)
        r = sh(["debootstrap", "--variant=minbase", "--include=systemd", SUITE, tmp, mirror])
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:])
            fatal("debootstrap %s from %s failed (the first run needs the Debian mirror; "
                  "DF_DEBIAN_MIRROR names another)" % (SUITE, mirror))
        # keep the downloaded .debs for later installs, out of the copied root
        src_arch = os.path.join(tmp, "var/cache/apt/archives")
        for f in os.listdir(src_arch):
            if f.endswith(".deb"):
                shutil.move(os.path.join(src_arch, f), os.path.join(archives, f))
        open(os.path.join(tmp, ".df-complete"), "w").close()
        shutil.rmtree(base, ignore_errors=True)
        os.rename(tmp, base)
        step("debootstrap (cold cache)", t0)
        t0 = time.monotonic()
    # the root: an overlay of the cached one (its changes go to WORK_DIR/upper), else a copy
    root, upper, ovwork = (os.path.join(work, d) for d in ("root", "upper", "overlay-work"))
    for d in (root, upper, ovwork):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    if sh(["mount", "-t", "overlay", "overlay", "-o", "lowerdir=%s,upperdir=%s,workdir=%s" % (
            base, upper, ovwork), root]).returncode != 0:
        print("      (no overlay mount here: copying the cached root)", flush=True)
        os.rmdir(root)
        if sh(["cp", "-a", base, root]).returncode != 0:
            fatal("cannot copy %s to %s" % (base, root))
    check(not os.path.exists(root + source) and not os.path.exists(root + build),
          "the source tree %s and build tree %s are not in the root" % (source, build))
    for args in (["-t", "proc", "proc", root + "/proc"], ["--rbind", "/sys", root + "/sys"],
                 ["--rbind", "/dev", root + "/dev"],
                 ["--bind", archives, root + "/var/cache/apt/archives"]):
        if sh(["mount", *args]).returncode != 0:
            fatal("mount %s failed" % " ".join(args))
    shutil.copy("/etc/resolv.conf", root + "/etc/resolv.conf")
    shutil.copy(deb, root + "/tmp/")
    step("fresh root", t0)

    env0 = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
            "DEBIAN_FRONTEND": "noninteractive", "HOME": "/root"}

    def chroot(cmd, user=None, timeout=600, **kw):
        pre = ["chroot"] + (["--userspec=deltafin:deltafin"] if user else []) + [root]
        env = dict(env0, HOME="/var/lib/deltafin") if user else env0
        return sh(pre + ["/usr/bin/env", "-i"] + ["%s=%s" % kv for kv in env.items()] + cmd,
                  timeout=timeout, **kw)

    t0 = time.monotonic()
    # (--force-unsafe-io: no fsync per unpacked file; the root is thrown away anyway)
    inst = ["apt-get", "install", "-y", "-q", "--no-install-recommends",
            "-o", "Dpkg::Options::=--force-unsafe-io", "/tmp/" + os.path.basename(deb)]
    r = chroot(inst)
    if r.returncode != 0:  # cached package lists gone stale on the mirror: refresh, retry
        print("      apt-get install failed; apt-get update and retry:\n" + r.stdout[-1500:] +
              r.stderr[-1500:], flush=True)
        chroot(["apt-get", "update", "-q"])
        r = chroot(inst)
    m = re.search(r"(\d+) newly installed", r.stdout)
    if not check(r.returncode == 0, "apt-get install ./%s in a clean %s root (%s packages)"
                 % (os.path.basename(deb), SUITE, m.group(1) if m else "?")):
        print(r.stdout[-3000:], r.stderr[-3000:])
        return 1
    step("apt-get install (Depends resolved)", t0)
    t0 = time.monotonic()

    # ---- 3. the installed package ---------------------------------------------------------
    st = chroot(["dpkg-query", "-W", "-f", "${Status}", "deltafin"]).stdout
    check(st == "install ok installed", "dpkg: deltafin %s" % st)
    r = chroot(["systemd-analyze", "verify", "--man=no", "/lib/systemd/system/df-node.service",
                "/lib/systemd/system/deltafin-serve.service"])
    check(r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(),
          "systemd-analyze verify: both units clean%s" % (
              (": " + (r.stdout + r.stderr).strip()[:600]) if (r.stdout + r.stderr).strip()
              else ""))
    pw = chroot(["getent", "passwd", "deltafin"]).stdout.strip().split(":")
    check(len(pw) == 7 and 100 <= int(pw[2]) < 1000 and pw[5] == "/var/lib/deltafin" and
          pw[6] in ("/usr/sbin/nologin", "/bin/false"),
          "system user deltafin (uid %s, home %s, shell %s)" % (
              pw[2] if len(pw) > 2 else "?", pw[5] if len(pw) > 5 else "?",
              pw[6] if len(pw) > 6 else "?"))
    s = os.stat(root + "/var/lib/deltafin")
    check(oct(s.st_mode & 0o777) == "0o700" and s.st_uid == int(pw[2]),
          "/var/lib/deltafin: deltafin's, mode 700")
    s = os.stat(root + "/etc/deltafin/api.key")
    key = open(root + "/etc/deltafin/api.key").read().strip()
    check(oct(s.st_mode & 0o777) == "0o600" and s.st_uid == int(pw[2]) and len(key) >= 32,
          "/etc/deltafin/api.key: a random key, deltafin's, mode 600")

    # the build tree's binary, then the installed one as the user deltafin: the same text
    args = ["run", "--prompt", PROMPT] + RUN_ARGS
    host = sh([deltafin] + args, timeout=300)
    inst_run = chroot(["/usr/bin/deltafin"] + args, user=True, timeout=300)
    check(host.returncode == 0 and inst_run.returncode == 0 and host.stdout.strip() and
          inst_run.stdout == host.stdout,
          "installed `deltafin run` (demo pair, seed 1234, --fixed-k) prints the build tree's "
          "text exactly: %r" % inst_run.stdout[:80])
    if inst_run.stdout != host.stdout:
        print("      build tree: %r\n      installed:  %r\n      stderr: %s" % (
            host.stdout, inst_run.stdout, inst_run.stderr[-800:]))
    host = sh([deltafin, "tokenize", TOKENIZE_TEXT])
    inst_tok = chroot(["/usr/bin/deltafin", "tokenize", TOKENIZE_TEXT], user=True)
    check(host.returncode == 0 and inst_tok.returncode == 0 and inst_tok.stdout == host.stdout,
          "installed `deltafin tokenize` (demo tokenizer) = the build tree's")
    doc = chroot(["/usr/bin/deltafin", "doctor", "--json"], user=True)
    try:
        model = [c for c in json.loads(doc.stdout)["checks"] if c["check"] == "model"][0]
    except (ValueError, KeyError, IndexError):
        model = {"status": "?", "finding": doc.stdout[-300:] + doc.stderr[-300:]}
    check(model["status"] == "OK" and "/usr/share/deltafin/models/demo-moe" in
          model["finding"], "installed `deltafin doctor`: model OK, the installed demo model "
          "(%s)" % model["finding"][:120])
    step("runs in the root", t0)
    t0 = time.monotonic()

    # ---- the units' ExecStart= lines, expanded as systemd expands them --------------------
    def unit_exec(unit, envfiles):
        env = {}
        for ef in envfiles:
            if os.path.exists(root + ef):
                for ln in open(root + ef):
                    ln = ln.strip()
                    if ln and not ln.startswith("#") and "=" in ln:
                        k, v = ln.split("=", 1)
                        env[k] = v.strip('"')
        text = open(root + "/lib/systemd/system/" + unit).read()
        line = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
        argv = []
        for w in line.split():
            m = re.fullmatch(r"\$(\w+)", w)
            if m:  # $VAR: split at white space, nothing when empty
                argv += env.get(m.group(1), "").split()
            else:  # ${VAR} inside a word: substituted as one word
                argv.append(re.sub(r"\$\{(\w+)\}", lambda mm: env.get(mm.group(1), ""), w))
        return argv, env

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def spawn(argv, extra_env=()):
        env = dict(env0, HOME="/var/lib/deltafin", **dict(extra_env))
        return subprocess.Popen(["chroot", "--userspec=deltafin:deltafin", root, "/usr/bin/env",
                                 "-i"] + ["%s=%s" % kv for kv in env.items()] + argv,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(p):
        p.send_signal(signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return p.returncode, out

    # df-node: a token from a coordinator key made as the user deltafin; no coordinator runs,
    # so the node keeps retrying until SIGTERM (exit 0), having pinned the coordinator.
    tok = chroot(["/usr/bin/deltafin", "cluster", "token", "--state-dir",
                  "/var/lib/deltafin/coordinator"], user=True)
    check(tok.returncode == 0 and tok.stdout.startswith("dft1_"),
          "`deltafin cluster token --state-dir /var/lib/deltafin/coordinator` as deltafin")
    cport = free_port()
    conf = open(root + "/etc/deltafin/df-node.conf").read()
    conf = re.sub(r"^DELTAFIN_COORDINATOR=.*$", "DELTAFIN_COORDINATOR=127.0.0.1:%d" % cport,
                  conf, flags=re.M)
    conf = re.sub(r"^DELTAFIN_NODE_OPTS=.*$", "DELTAFIN_NODE_OPTS=--memory 64M --name pkgtest",
                  conf, flags=re.M)
    open(root + "/etc/deltafin/df-node.conf", "w").write(conf)
    with open(root + "/etc/deltafin/df-node.token", "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write("DELTAFIN_JOIN_TOKEN=%s\n" % tok.stdout.strip())
    argv, env = unit_exec("df-node.service", ["/etc/deltafin/df-node.conf",
                                              "/etc/deltafin/df-node.token"])
    node = spawn(argv, [("DELTAFIN_JOIN_TOKEN", env.get("DELTAFIN_JOIN_TOKEN", ""))])
    pinned = root + "/var/lib/deltafin/node/coordinator"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not os.path.exists(pinned) and node.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)
    alive = node.poll() is None
    rc, out = stop(node)
    check(alive and rc == 0 and os.path.exists(pinned) and
          os.path.exists(root + "/var/lib/deltafin/node/node.key"),
          "df-node.service's ExecStart (%s) as deltafin: key and pinned coordinator in "
          "/var/lib/deltafin/node, exit 0 on SIGTERM" % " ".join(argv[:3]))
    if rc != 0 or not alive:
        print(out[-1500:])
    # serve: the shipped serve.conf with a free port; the generated key guards /v1
    sport = free_port()
    conf = open(root + "/etc/deltafin/serve.conf").read()
    conf = re.sub(r"^DELTAFIN_PORT=.*$", "DELTAFIN_PORT=%d" % sport, conf, flags=re.M)
    open(root + "/etc/deltafin/serve.conf", "w").write(conf)
    argv, _ = unit_exec("deltafin-serve.service", ["/etc/deltafin/serve.conf"])
    srv = spawn(argv)
    health = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and srv.poll() is None:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % sport, timeout=2) as r:
                health = r.status
                break
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)

    def models(auth):
        req = urllib.request.Request("http://127.0.0.1:%d/v1/models" % sport)
        if auth:
            req.add_header("Authorization", "Bearer " + auth)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, None
        except (urllib.error.URLError, OSError, ValueError):
            return None, None
    no_key, _ = models(None)
    with_key, body = models(key)
    ids = [m.get("id") for m in (body or {}).get("data", [])]
    rc, out = stop(srv)
    check(health == 200 and no_key == 401 and with_key == 200 and "demo-moe" in ids and rc == 0,
          "deltafin-serve.service's ExecStart as deltafin: /health 200, /v1/models 401 without "
          "the key, 200 with it (%s), exit 0 on SIGTERM (got %s %s %s rc %s)" % (
              ids, health, no_key, with_key, rc))
    if rc != 0 or health != 200:
        print(out[-1500:])
    step("units' commands", t0)
    t0 = time.monotonic()

    # ---- 4. reinstall, purge --------------------------------------------------------------
    r = chroot(["dpkg", "-i", "/tmp/" + os.path.basename(deb)])
    check(r.returncode == 0 and open(root + "/etc/deltafin/api.key").read().strip() == key and
          "pkgtest" in open(root + "/etc/deltafin/df-node.conf").read(),
          "reinstalling: postinst again, the API key and the edited df-node.conf kept")
    r = chroot(["apt-get", "purge", "-y", "-q", "deltafin"])
    gone = [p for p in ("/usr/bin/deltafin", "/usr/bin/df-node", "/usr/share/deltafin",
                        "/var/lib/deltafin", "/etc/deltafin",
                        "/lib/systemd/system/df-node.service") if os.path.lexists(root + p)]
    check(r.returncode == 0 and not gone, "apt-get purge deltafin: files, state and "
          "/etc/deltafin removed%s" % ((": left " + ", ".join(gone)) if gone else ""))
    check(chroot(["getent", "passwd", "deltafin"]).returncode == 0,
          "the user deltafin stays after purge")
    step("reinstall, purge", t0)

    print("time  %-44s %6.1f s" % ("total", time.time() - t_start))
    if not failures:  # the root with its ~1 GB of dependencies is kept only after a failure
        sh(["umount", "-R", "-l", root])
        for d in (root, upper, ovwork, ex, os.path.join(pkgdir, "_CPack_Packages")):
            shutil.rmtree(d, ignore_errors=True)
    if failures:
        print("%d check(s) failed:" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    print("all package checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
