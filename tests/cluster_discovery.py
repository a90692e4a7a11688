#!/usr/bin/env python3
"""Finding the coordinator over mDNS/DNS-SD (docs/CLUSTER.md "Finding the coordinator"): real
avahi-daemons on a private LAN of network namespaces, real `deltafin run --cluster` and
`df-node join` processes, ids and logits compared with a local run.

usage: cluster_discovery.py SCENARIO BUILD_DIR FIXTURES_DIR WORK_DIR BUILT
  BUILT: 1 when the build has discovery (libavahi-client found), else 0.
SCENARIO:
  lan       three network namespaces on one bridge (coordinator 10.213.7.1, node .2, an
            impostor .3), each with its own D-Bus system bus and avahi-daemon (private
            configurations under WORK_DIR, bus sockets in a temporary folder; the host's bus,
            daemon and /run are not used or changed):
            1. the impostor announces _deltafin._tcp with a forged fingerprint, pointing at a
               fake listener; a node started with only --token skips it (logged with its
               address and fingerprint; the listener sees no connection), finds the real
               coordinator and serves: ids and prompt logits identical to a local run, and the
               address found is recorded in the node's state directory
            2. the impostor copies the real fingerprint (it is public) twice, at a listener
               that hangs up after the node's CURVE HELLO and at one that answers it with a
               forged CURVE ERROR: a node restarted with neither token nor address (its stored
               key, as after a reboot) dials both, the handshake against the pinned key fails,
               the node sets each aside (no exit 3 on a refusal it cannot authenticate), and
               once the real coordinator is back it finds and serves that one: ids identical
            Needs root, iproute2 (ip netns, veth, bridge), dbus-daemon, avahi-daemon and
            avahi-publish; skipped (77) without them or without discovery in the build.
  nodaemon  no avahi-daemon (DBUS_SYSTEM_BUS_ADDRESS names a socket that does not exist):
            the coordinator prints one discovery line and a node given its address serves it
            (ids identical); restarted without an address, the node says discovery is
            unavailable and dials the address it recorded; a new node with only a token keeps
            looking until SIGTERM (exit 0), or, in a build without discovery, exits 1 saying
            to give HOST:PORT
Readiness is awaited on log lines, never on fixed sleeps.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

SCEN, BUILD, FIX, WORK, BUILT = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
DELTAFIN = os.path.join(BUILD, "coordinator", "deltafin")
DFNODE = os.path.join(BUILD, "node", "df-node")
MODEL = os.path.join(FIX, "tiny-moe-sparse")
PROMPT = "1,2,3,4,5,6,7,8,9,10,11,12"
DEADLINE = 90.0
IP = {"c": "10.213.7.1", "n": "10.213.7.2", "e": "10.213.7.3"}
FAKE_PORT = 7777     # closes the handshake
REFUSE_PORT = 7778   # sends a forged CURVE ERROR

failures = []
procs = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(pred, what, timeout=DEADLINE):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    check(False, "timed out waiting for " + what)
    return False


def wait_log(path, text, timeout=DEADLINE, count=1):
    return wait_for(lambda: read(path).count(text) >= count, "'%s' in %s" % (text, path), timeout)


def die_with_parent():
    """In the child: SIGKILL when this script dies (a daemon must not outlive a killed test)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(args, log, env=None, stdout=None):
    f = open(log, "ab")
    p = subprocess.Popen(args, stdout=stdout or f, stderr=f, env=env, preexec_fn=die_with_parent)
    procs.append(p)
    return p


def stop(p, sig=signal.SIGTERM):
    """Signal p and wait for it (killed after 10 s); its exit status."""
    if p.poll() is None:
        p.send_signal(sig)
    try:
        return p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def token(state):
    r = subprocess.run([DELTAFIN, "cluster", "token", "--state-dir", state], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def token_file(name, tok):
    path = os.path.join(WORK, "token-%s.txt" % name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (tok + "\n").encode())
    os.close(fd)
    return path


def fingerprint_of(state):
    r = subprocess.run([DELTAFIN, "cluster", "init", "--state-dir", state], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return re.search(r"fingerprint ([0-9a-f]{16})", r.stdout + r.stderr).group(1)


def run_local(tag):
    out = os.path.join(WORK, tag + ".f32")
    r = subprocess.run([DELTAFIN, "run", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new", "24",
                        "--temperature", "0", "--ignore-eos", "--no-draft", "--logits-out", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(), open(out, "rb").read()


def coordinator(tag, state, port, bind, env, prefix=()):
    """`deltafin run --cluster` waiting for one node; (proc, ids path, log path, logits path)."""
    out = os.path.join(WORK, tag + ".f32")
    so, se = os.path.join(WORK, tag + ".ids"), os.path.join(WORK, tag + ".log")
    args = [*prefix, DELTAFIN, "run", "--model", MODEL, "--prompt-ids", PROMPT, "--max-new", "24",
            "--temperature", "0", "--ignore-eos", "--no-draft", "--logits-out", out, "--cluster",
            "--cluster-bind", bind, "--cluster-port", str(port), "--state-dir", state,
            "--cluster-nodes", "1", "--cluster-wait", "90"]
    return spawn(args, se, env=env, stdout=open(so, "wb")), so, se, out


def finish(p, so, out):
    try:
        p.wait(timeout=DEADLINE + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "coordinator finished in time")
        return None, None
    return read(so).split(), open(out, "rb").read() if os.path.exists(out) else b""


def node(name, state, log, env, addr=None, tok=None, prefix=()):
    args = [*prefix, DFNODE, "join"] + ([addr] if addr else []) + [
        "--state-dir", state, "--memory", "1G", "--name", name, "--threads", "1",
        "--model-dir", MODEL]
    if tok:
        args += ["--token-file", token_file(name, tok)]
    return spawn(args, log, env=env)


# ---- a private LAN of network namespaces -------------------------------------------------

TAG = "dfd%d" % os.getpid()
NS = {r: "%s-%s" % (TAG, r) for r in ("lan", "c", "n", "e")}


class Unavailable(Exception):
    pass


def sh(*args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise Unavailable("%s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))


BUSDIR = []  # the buses' sockets: a short folder of their own (socket paths hold 107 bytes)


def bus(role):
    if not BUSDIR:
        import tempfile
        BUSDIR.append(tempfile.mkdtemp(prefix="dfd-bus-"))
    return "unix:path=" + os.path.join(BUSDIR[0], "bus-" + role)


def env_of(role):
    return dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus(role))


def in_ns(role):
    return ["ip", "netns", "exec", NS[role]]


BUS_CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""

AVAHI_CONF = """[server]
host-name=dfd-%s
use-ipv4=yes
use-ipv6=no
allow-interfaces=eth0
enable-dbus=yes
[wide-area]
enable-wide-area=no
[publish]
publish-hinfo=no
publish-workstation=no
"""

# A listener that speaks just enough ZMTP to be dialled as a CURVE server (its greeting) and
# reads the node's greeting and HELLO; without the coordinator's secret key it cannot answer
# that HELLO, as no impostor can. Mode "close" then hangs up; mode "refuse" first sends a
# CURVE ERROR "400", a refusal forged without any key (CurveZMQ does not authenticate it).
FAKE = r"""
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("fake listener up", flush=True)
greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\x01" + b"\0" * 31
error = b"\x04\x0a\x05ERROR\x03400"
while True:
    c, a = s.accept()
    c.settimeout(2)
    got = b""
    try:
        c.sendall(greeting)
        while len(got) < 64 + 202:  # its greeting, then HELLO (a 200-byte command)
            b = c.recv(4096)
            if not b:
                break
            got += b
        if sys.argv[2] == "refuse":
            c.sendall(error)
            time.sleep(0.2)
    except OSError:
        pass
    mech = got[12:32].rstrip(b"\0").decode(errors="replace") if len(got) >= 32 else "?"
    print("connection from %s: mechanism %s, %d bytes, %s" % (a[0], mech, len(got), sys.argv[2]),
          flush=True)
    c.close()
"""


def lan_up():
    for tool in ("ip", "unshare", "dbus-daemon", "avahi-daemon", "avahi-publish", "avahi-browse"):
        if not shutil.which(tool):
            raise Unavailable("%s is not installed (tools/install-deps.sh installs it)" % tool)
    if os.geteuid() != 0:
        raise Unavailable("network namespaces need root")
    # namespaces a killed earlier run left behind: its pid is in their names
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for name, pid in re.findall(r"^(dfd(\d+)-(?:lan|c|n|e))\b", r.stdout, re.M):
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        except OSError:
            pass
    for r in NS:
        sh("ip", "netns", "add", NS[r])
    lan = NS["lan"]
    sh("ip", "-n", lan, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
    sh("ip", "-n", lan, "link", "set", "br0", "up")
    for r in ("c", "n", "e"):
        sh("ip", "-n", lan, "link", "add", "v" + r, "type", "veth", "peer", "name", "eth0",
           "netns", NS[r])
        sh("ip", "-n", lan, "link", "set", "v" + r, "master", "br0", "up")
        sh("ip", "-n", NS[r], "addr", "add", IP[r] + "/24", "dev", "eth0")
        sh("ip", "-n", NS[r], "link", "set", "eth0", "up")
        sh("ip", "-n", NS[r], "link", "set", "lo", "up")
    logs = {}
    for r in ("c", "n", "e"):  # each machine: a system bus and an avahi-daemon of its own
        bc, ac = os.path.join(WORK, "bus-%s.conf" % r), os.path.join(WORK, "avahi-%s.conf" % r)
        with open(bc, "w") as f:
            f.write(BUS_CONF % bus(r))
        with open(ac, "w") as f:
            f.write(AVAHI_CONF % r)
        bl = os.path.join(WORK, "dbus-%s.log" % r)
        spawn(in_ns(r) + ["dbus-daemon", "--config-file=" + bc, "--nofork", "--print-address"], bl)
        wait_log(bl, "unix:path=", timeout=20)
        # /run is a private tmpfs in the daemon's mount namespace: its pid file and socket
        # never meet the host's (or the other daemons')
        logs[r] = os.path.join(WORK, "avahi-%s.log" % r)
        spawn(in_ns(r) + ["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /run && mkdir "
                          "/run/avahi-daemon && exec avahi-daemon -f %s --no-drop-root "
                          "--no-chroot --no-rlimits --no-proc-title" % ac], logs[r], env=env_of(r))
    for r in ("c", "n", "e"):
        if not wait_log(logs[r], "Server startup complete", timeout=30):
            raise Unavailable("avahi-daemon in %s did not start: %s" % (NS[r], read(logs[r])[-400:]))


def lan_down():
    for p in reversed(procs):
        stop(p)
    for r in NS:
        subprocess.run(["ip", "netns", "del", NS[r]], capture_output=True)
    for d in BUSDIR:
        shutil.rmtree(d, ignore_errors=True)


def browse_names(role):
    """Instance names of _deltafin._tcp the daemon of `role` resolves now."""
    r = subprocess.run(in_ns(role) + ["avahi-browse", "-rpt", "_deltafin._tcp"], capture_output=True,
                       text=True, timeout=30, env=env_of(role))
    return {ln.split(";")[3] for ln in r.stdout.splitlines() if ln.startswith("=")}


def scen_lan():
    if not BUILT:
        print("skipped: this build has no discovery (libavahi-client was not found)")
        sys.exit(77)
    ids0, lg0 = run_local("local")
    try:
        lan_up()
    except Unavailable as e:
        lan_down()
        print("skipped: cannot build the test LAN: %s" % e)
        sys.exit(77)
    try:
        lan_test(ids0, lg0)
    finally:
        lan_down()


def lan_test(ids0, lg0):
    cstate, nstate = os.path.join(WORK, "coord"), os.path.join(WORK, "node")
    real_fp = fingerprint_of(cstate)
    forged_fp = "%016x" % (int(real_fp, 16) ^ 0x5A5A5A5A5A5A5A5A)
    tok = token(cstate)
    # the impostor machine: a fake listener and a forged announcement pointing at it
    fake_log = os.path.join(WORK, "fake.log")
    fake_py = os.path.join(WORK, "fake.py")
    with open(fake_py, "w") as f:
        f.write(FAKE)
    spawn(in_ns("e") + [sys.executable, fake_py, str(FAKE_PORT), "close"], fake_log)
    wait_log(fake_log, "fake listener up")
    refuse_log = os.path.join(WORK, "refuse.log")
    spawn(in_ns("e") + [sys.executable, fake_py, str(REFUSE_PORT), "refuse"], refuse_log)
    wait_log(refuse_log, "fake listener up")
    pub_log = os.path.join(WORK, "publish-forged.log")
    spawn(in_ns("e") + ["avahi-publish", "-s", "deltafin-impostor", "_deltafin._tcp", str(FAKE_PORT),
                        "fp=" + forged_fp, "v=2"], pub_log, env=env_of("e"))
    wait_log(pub_log, "Established")
    # 1. the real coordinator announces itself; a node with only --token finds it
    p, so, se, out = coordinator("lan1", cstate, 7070, "0.0.0.0", env_of("c"), in_ns("c"))
    wait_log(se, "discovery: announced")
    check(("(key %s)" % real_fp) in read(se), "the coordinator announced its key's fingerprint")
    wait_for(lambda: {"deltafin-impostor"} < browse_names("n"),
             "the node's daemon resolves both announcements")
    nlog = os.path.join(WORK, "node1.log")
    n1 = node("n1", nstate, nlog, env_of("n"), tok=tok, prefix=in_ns("n"))
    ids, lg = finish(p, so, out)
    check(ids == ids0, "token only, found by discovery: ids identical (%s)" % " ".join(ids or []))
    check(lg == lg0, "token only, found by discovery: prompt logits bitwise identical")
    text = read(nlog)
    print(text)
    check(("skipping the announcer 'deltafin-impostor' at %s:%d: its key fingerprint %s is not "
           "the pinned %s" % (IP["e"], FAKE_PORT, forged_fp, real_fp)) in text,
          "the node skipped the forged announcer, naming its address and fingerprint")
    check(("at %s:7070, which names the pinned key %s" % (IP["c"], real_fp)) in text,
          "the node found the real coordinator at %s:7070" % IP["c"])
    check("ready:" in text and "joining tcp://%s:7070 with a token" % IP["c"] in text,
          "the node joined with its token and became ready")
    check("connection from" not in read(fake_log), "the forged announcer got no connection")
    rec = read(os.path.join(nstate, "coordinator")).split()
    check(len(rec) == 2 and rec[1] == "tcp://%s:7070" % IP["c"],
          "the node recorded the address it found: %s" % rec[1:])
    check(stop(n1) == 0, "the node stops on SIGTERM (exit 0)")

    # 2. two copycats of the real fingerprint (one hangs up, one forges a refusal); a node
    # with no token and no address
    for name, port in (("deltafin-copycat", FAKE_PORT), ("deltafin-refuser", REFUSE_PORT)):
        plog = os.path.join(WORK, "publish-%s.log" % name)
        spawn(in_ns("e") + ["avahi-publish", "-s", name, "_deltafin._tcp", str(port),
                            "fp=" + real_fp, "v=2"], plog, env=env_of("e"))
        wait_log(plog, "Established")
    # the real coordinator has exited: its announcement is withdrawn
    wait_for(lambda: browse_names("n") == {"deltafin-impostor", "deltafin-copycat",
                                           "deltafin-refuser"},
             "the node's daemon sees only the three impostors")
    nlog2 = os.path.join(WORK, "node2.log")
    n2 = node("n1", nstate, nlog2, env_of("n"), prefix=in_ns("n"))
    wait_log(nlog2, "closed the CURVE handshake 5 times in a row")
    wait_log(nlog2, "discovery: refused at")
    text = read(nlog2)
    check(("tcp://%s:%d closed the CURVE handshake 5 times in a row, so it does not hold the "
           "pinned key %s; looking for another announcer" % (IP["e"], FAKE_PORT, real_fp)) in text,
          "the copycat that hangs up failed the CURVE handshake and was set aside")
    check(("discovery: refused at tcp://%s:%d: this node's key" % (IP["e"], REFUSE_PORT)) in text
          and n2.poll() is None,
          "the copycat's forged refusal was set aside too: the node keeps looking, no exit 3")
    check("mechanism CURVE" in read(fake_log) and "mechanism CURVE" in read(refuse_log),
          "the node spoke CURVE to both: %s" % (read(fake_log).strip().splitlines()[-1:]
                                                + read(refuse_log).strip().splitlines()[-1:]))
    p, so, se, out = coordinator("lan2", cstate, 7070, "0.0.0.0", env_of("c"), in_ns("c"))
    ids, _ = finish(p, so, out)
    text = read(nlog2)
    print(text)
    check(ids == ids0, "stored key, no token, no address (a reboot): ids identical (%s)"
          % " ".join(ids or []))
    check(text.count("ready:") == 1 and "joining tcp://%s:7070 with the stored key" % IP["c"] in text,
          "after the copycat, the node joined the real coordinator with its stored key")
    check(n2.poll() is None, "the node is still running")
    check(stop(n2) == 0, "the node stops on SIGTERM (exit 0)")


def scen_nodaemon():
    ids0, _ = run_local("local")
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent/deltafin-no-bus")
    cstate = os.path.join(WORK, "coord")
    fingerprint_of(cstate)
    tok = token(cstate)
    port = free_port()
    p, so, se, out = coordinator("nd1", cstate, port, "0.0.0.0", env)
    wait_log(se, "listening on")
    nlog = os.path.join(WORK, "node1.log")
    nstate = os.path.join(WORK, "node")
    n1 = node("n1", nstate, nlog, env, addr="127.0.0.1:%d" % port, tok=tok)
    ids, _ = finish(p, so, out)
    log = read(se)
    lines = [ln for ln in log.splitlines() if "discovery" in ln]
    print("\n".join(lines))
    want = "nodes must be given" if BUILT else "not built in"
    check(len(lines) == 1 and want in lines[0] and "HOST:%d" % port in lines[0],
          "the coordinator wrote one discovery line (%s)" % want)
    check(ids == ids0, "the cluster works by address without a daemon: ids identical")
    check(stop(n1) == 0, "the node stops on SIGTERM (exit 0)")
    # the node again without an address: it dials the one it recorded
    nlog2 = os.path.join(WORK, "node2.log")
    n2 = node("n1", nstate, nlog2, env)
    p, so, se, out = coordinator("nd2", cstate, port, "0.0.0.0", env)
    ids, _ = finish(p, so, out)
    text = read(nlog2)
    print(text)
    check(ids == ids0, "no address, no daemon: the recorded address serves, ids identical")
    check(("discovery unavailable" in text if BUILT else "discovery is not built in" in text) and
          "recorded address tcp://127.0.0.1:%d" % port in text,
          "the node said why and dialled the recorded address")
    check(stop(n2) == 0, "the node stops on SIGTERM (exit 0)")
    # a new node with only a token and no daemon: keeps looking, or (no discovery) exits 1
    nlog3 = os.path.join(WORK, "node3.log")
    n3 = node("n3", os.path.join(WORK, "node3"), nlog3, env, tok=token(cstate))
    if BUILT:
        wait_log(nlog3, "discovery unavailable")
        check("df-node join HOST:PORT" in read(nlog3), "the line says how to do without: %s"
              % read(nlog3).strip().splitlines()[-1:])
        time.sleep(1.0)  # that it keeps looking rather than exiting is the point
        check(n3.poll() is None, "the node keeps looking")
        check(stop(n3) == 0, "and stops on SIGTERM (exit 0)")
    else:
        rc = n3.wait(timeout=30)
        check(rc == 1 and "HOST:PORT" in read(nlog3), "no discovery built in: exit 1 naming "
              "HOST:PORT (%s)" % rc)


def main():
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skipped: no fixture %s" % MODEL)
        sys.exit(77)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    t0 = time.monotonic()
    try:
        {"lan": scen_lan, "nodaemon": scen_nodaemon}[SCEN]()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    print("%s: %d failure(s) in %.1f s" % (SCEN, len(failures), time.monotonic() - t0))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
