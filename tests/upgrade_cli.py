#!/usr/bin/env python3
"""deltafin upgrade (coordinator/cli/cmd_upgrade.c, tools/cmake/build_record.cmake, docs/UPGRADE.md)
end to end, on a tiny CMake project instead of the Deltafin tree (whose rebuild takes many
minutes): the project includes the real tools/cmake/build_record.cmake, so its configure writes a
real build record, and `deltafin upgrade --record FILE` is pointed at that record (--record is
the only difference from a plain `deltafin upgrade`, which reads its own build folder's record).

A bare repository stands in for the upstream, a seed clone pushes new commits to it, and the
checkout under test (a path with a space) is a clone configured with -DCMAKE_BUILD_TYPE=Release
-DDF_CUDA=ON -DCMAKE_PREFIX_PATH=/recorded/prefix -DDF_TORCH_ROOT=<dir>. The tiny program prints
the values it was compiled with. Checked, with real git state and the program's output:

  * the record: source and build folders, the cache settings with their types
  * up to date: exit 0, says so, nothing changes
  * behind, --check: exit 10, fetched but the checkout and the build are unchanged
  * behind, no --yes and no terminal: refused (3), nothing changed
  * a modified file and an untracked file: refused (3) naming the file, nothing changed
  * detached HEAD, no upstream, fetch failure: stopped with the state and a recovery command
  * clean and behind, build folder deleted, a hostile environment (CC, CFLAGS,
    CMAKE_BUILD_TYPE=Debug, CMAKE_GENERATOR, CMAKE_PREFIX_PATH; the same environment makes a
    plain cmake fail): exit 0, the new commit checked out, the program rebuilt with the
    recorded settings and none of the environment's, the environment's names listed as ignored
  * local commits: ahead and diverged refused (3), the checkout unchanged
  * a build failure (the new commit needs a header under DF_TORCH_ROOT that is missing):
    exit 5, the report names the new commit and the old one, says the build folder was not
    rebuilt, the marker file is left and the old program kept; --check then reports the
    unfinished rebuild (10); after the header appears a plain rerun finishes it (exit 0)
  * HOME (the default models / cache / state / keys location) is left empty
  * the Deltafin build folder's own record, and `upgrade --help` naming it; bad records and
    usage errors

usage: upgrade_cli.py DELTAFIN CMAKE SOURCE_DIR BINARY_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

exe, cmake, src_dir, bin_dir, work = sys.argv[1:6]
fails = 0


def check(cond, what, detail=""):
    global fails
    if cond:
        print("ok   ", what)
    else:
        fails += 1
        print("FAIL ", what)
        if detail:
            print("      " + str(detail).replace("\n", "\n      "))


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
work = os.path.realpath(work)
home = os.path.join(work, "home")
os.makedirs(home)
DROP = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CUDA_PATH", "CUDA_HOME",
        "Torch_DIR", "MAKEFLAGS", "MFLAGS")
env = {k: v for k, v in os.environ.items()
       if not k.startswith(("GIT_", "CMAKE_", "XDG_")) and k not in DROP}
env.update(HOME=home, LC_ALL="C", GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0",
           GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
           GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid")


def run(argv, extra=None, cwd=None, stdin=subprocess.DEVNULL):
    e = dict(env)
    e.update(extra or {})
    return subprocess.run(argv, env=e, cwd=cwd, stdin=stdin, capture_output=True, text=True)


def g(repo, *args):
    r = run(["git", "-C", repo] + list(args))
    if r.returncode != 0:
        sys.exit("git %s failed: %s" % (" ".join(args), r.stderr))
    return r.stdout.strip()


origin = os.path.join(work, "origin.git")
seed = os.path.join(work, "seed")
clone = os.path.join(work, "my checkout")
build = os.path.join(clone, "build")
torch = os.path.join(work, "torch")
REC = os.path.join(build, "deltafin-build.json")
tiny = os.path.join(build, "tiny")

CMAKELISTS = r"""cmake_minimum_required(VERSION 3.18)
project(tiny LANGUAGES C)
option(DF_CUDA "test option" OFF)
set(DF_TORCH_ROOT "" CACHE PATH "folder with include/torch_stub.h")
add_executable(tiny main.c)
target_include_directories(tiny PRIVATE "${DF_TORCH_ROOT}/include")
target_compile_definitions(tiny PRIVATE TINY_CUDA="${DF_CUDA}" TINY_TYPE="${CMAKE_BUILD_TYPE}"
  TINY_PREFIX="${CMAKE_PREFIX_PATH}" TINY_ENV_PREFIX="$ENV{CMAKE_PREFIX_PATH}")
include("%s/tools/cmake/build_record.cmake")
df_write_build_record()
""" % src_dir.replace("\\", "/")

MAIN = r"""#include <stdio.h>
%s
#define VERSION %d
int main(void) {
  printf("version=%%d cuda=%%s type=%%s prefix=%%s env_prefix=%%s", VERSION, TINY_CUDA, TINY_TYPE,
         TINY_PREFIX, TINY_ENV_PREFIX);
#ifdef TINY_ENV_LEAK
  printf(" env_leak");
#endif
#ifdef NDEBUG
  printf(" ndebug");
#endif
#ifdef TORCH_STUB
  printf(" stub=%%s", TORCH_STUB);
#endif
  printf("\n");
  return 0;
}
"""


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def commit(version, include="", msg=None):
    write(os.path.join(seed, "main.c"), MAIN % (include, version))
    g(seed, "add", "-A")
    g(seed, "commit", "-q", "-m", msg or "version %d" % version)
    g(seed, "push", "-q", "origin", "main")
    return g(seed, "rev-parse", "HEAD")


def tiny_out():
    r = run([tiny])
    return r.stdout.strip() if r.returncode == 0 else "(no program: %s)" % r.stderr.strip()


def up(*args, extra=None):
    return run([exe, "upgrade", "--record", REC] + list(args), extra=extra)


def head():
    return g(clone, "rev-parse", "HEAD")


def both(r):
    return r.stdout + r.stderr


# ---- the upstream, the checkout, its first build ----
run(["git", "init", "-q", "--bare", "-b", "main", origin])
os.makedirs(seed)
g(seed, "init", "-q", "-b", "main")
write(os.path.join(seed, "CMakeLists.txt"), CMAKELISTS)
write(os.path.join(seed, ".gitignore"), "/build/\n")
write(os.path.join(seed, "README"), "tiny\n")
g(seed, "remote", "add", "origin", origin)
write(os.path.join(seed, "main.c"), MAIN % ("", 1))
g(seed, "add", "-A")
g(seed, "commit", "-q", "-m", "version 1")
g(seed, "push", "-q", "-u", "origin", "main")
v1 = g(seed, "rev-parse", "HEAD")
r = run(["git", "clone", "-q", origin, clone])
check(r.returncode == 0, "clone", r.stderr)
os.makedirs(torch)
r = run([cmake, "-S", clone, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DDF_CUDA=ON",
         "-DCMAKE_PREFIX_PATH=/recorded/prefix", "-DDF_TORCH_ROOT=" + torch])
check(r.returncode == 0, "first configure", both(r))
r = run([cmake, "--build", build])
check(r.returncode == 0, "first build", both(r))
GOOD = "cuda=ON type=Release prefix=/recorded/prefix env_prefix= ndebug"
check(tiny_out() == "version=1 " + GOOD, "the first build prints its settings", tiny_out())

rec = json.load(open(REC))
sets = {e["name"]: (e["type"], e["value"]) for e in rec["cache"]}
check(rec["deltafin_build_record"] == 1 and rec["source_dir"] == clone and
      rec["build_dir"] == build and os.path.isabs(rec["cmake"]) and rec["generator"],
      "record: format, checkout, build folder, cmake, generator", rec)
check(sets.get("DF_CUDA") == ("BOOL", "ON") and sets.get("CMAKE_BUILD_TYPE") == ("STRING", "Release")
      and sets.get("CMAKE_PREFIX_PATH", ("", ""))[1] == "/recorded/prefix"
      and sets.get("DF_TORCH_ROOT") == ("PATH", torch)
      and sets.get("CMAKE_C_COMPILER", ("", ""))[0] == "FILEPATH"
      and sets.get("CMAKE_C_FLAGS") == ("STRING", ""),
      "record: DF_CUDA, build type, prefix path, DF_TORCH_ROOT, compiler, flags", sets)
saved_rec = os.path.join(work, "record.json")
shutil.copyfile(REC, saved_rec)

# ---- up to date ----
r = up("--yes")
check(r.returncode == 0 and "already up to date" in r.stdout and head() == v1,
      "up to date: exit 0, says so, HEAD unchanged", both(r))
check("DF_CUDA=ON" in r.stdout and "CMAKE_PREFIX_PATH=/recorded/prefix" in r.stdout and
      "the rebuild reuses exactly this recorded configuration" in r.stdout,
      "lists the recorded configuration it reuses", r.stdout)

# ---- behind: --check, then the refusals ----
v2 = commit(2)
r = up("--check")
check(r.returncode == 10 and "would fast-forward main to " + v2 in r.stdout,
      "--check: exit 10, names the target commit", both(r))
check(head() == v1 and g(clone, "rev-parse", "origin/main") == v2 and tiny_out().startswith("version=1")
      and not os.path.exists(os.path.join(build, "deltafin-upgrade.pending")),
      "--check: fetched, checkout and build unchanged")

r = up()
check(r.returncode == 3 and "not a terminal" in r.stderr and head() == v1,
      "no --yes without a terminal: refused, unchanged", both(r))

with open(os.path.join(clone, "main.c"), "a") as f:
    f.write("/* local edit */\n")
r = up("--yes")
check(r.returncode == 3 and "modified  main.c" in r.stderr and "not clean" in r.stderr
      and head() == v1 and "local edit" in open(os.path.join(clone, "main.c")).read()
      and tiny_out().startswith("version=1"),
      "modified file: refused naming it, nothing changed", both(r))
g(clone, "checkout", "-q", "--", "main.c")
write(os.path.join(clone, "notes.txt"), "mine\n")
r = up("--yes")
check(r.returncode == 3 and "untracked notes.txt" in r.stderr and head() == v1
      and os.path.exists(os.path.join(clone, "notes.txt")),
      "untracked file: refused naming it, nothing changed", both(r))
os.remove(os.path.join(clone, "notes.txt"))

g(clone, "checkout", "-q", "--detach")
r = up("--yes")
check(r.returncode == 3 and "detached HEAD" in r.stderr and ("detached HEAD at %s (unchanged)" % v1) in r.stderr
      and "git -C '%s' switch main" % clone in r.stderr and head() == v1,
      "detached HEAD: stopped, state and recovery printed", both(r))
g(clone, "checkout", "-q", "main")
g(clone, "branch", "-q", "--unset-upstream")
r = up("--yes")
check(r.returncode == 3 and "has no upstream" in r.stderr and
      "branch --set-upstream-to=origin/main main" in r.stderr
      and head() == v1, "no upstream: stopped with the recovery command", both(r))
g(clone, "checkout", "-q", "-b", "topic")  # a branch origin does not have
r = up("--yes")
check(r.returncode == 3 and "origin has no branch topic" in r.stderr and
      "push -u origin topic" in r.stderr and "origin/topic" not in r.stderr,
      "no upstream, no origin/topic: suggests pushing it, not origin/topic", both(r))
g(clone, "checkout", "-q", "main")
g(clone, "branch", "-q", "-D", "topic")
g(clone, "branch", "-q", "--set-upstream-to=origin/main")
g(clone, "remote", "set-url", "origin", os.path.join(work, "missing.git"))
r = up("--yes")
check(r.returncode == 1 and "git fetch failed" in r.stderr and
      ("branch main at %s (unchanged)" % v1) in r.stderr and "not touched" in r.stderr and head() == v1,
      "fetch failure: exit 1, state says unchanged", both(r))
g(clone, "remote", "set-url", "origin", origin)

# ---- clean and behind, a fresh build folder, a hostile environment ----
HOSTILE = {"CC": "/nonexistent/cc", "CFLAGS": "-DTINY_ENV_LEAK", "CMAKE_BUILD_TYPE": "Debug",
           "CMAKE_GENERATOR": "No Such Generator", "CMAKE_PREFIX_PATH": "/env/prefix"}
r = run([cmake, "-S", clone, "-B", os.path.join(work, "control")], extra=HOSTILE)
check(r.returncode != 0, "control: the hostile environment breaks a plain cmake", both(r))
shutil.rmtree(build)
REC_LIVE = REC
REC = saved_rec
r = up("--yes", extra=HOSTILE)
REC = REC_LIVE
check(r.returncode == 0 and ("fast-forwarded from %s to %s" % (v1, v2)) in r.stdout,
      "clean and behind: exit 0, fast-forwarded", both(r))
check(head() == v2 and g(clone, "status", "--porcelain") == "" and
      g(clone, "symbolic-ref", "--short", "HEAD") == "main",
      "the new commit is checked out on main, the checkout clean")
check(tiny_out() == "version=2 " + GOOD,
      "rebuilt with the recorded settings, none of the environment's", tiny_out())
ign = [l for l in r.stdout.splitlines() if "ignored from the environment:" in l]
check(ign and all(n in ign[0] for n in HOSTILE), "names the ignored environment variables", ign)
check(not os.path.exists(os.path.join(build, "deltafin-upgrade.pending")), "no marker left")
rec2 = json.load(open(REC))
sets2 = {e["name"]: (e["type"], e["value"]) for e in rec2["cache"]}
check(sets2 == sets and rec2["generator"] == rec["generator"],
      "the reconfigure wrote the same record again", (sets2, sets))

# ---- ahead, diverged ----
write(os.path.join(clone, "local.txt"), "local\n")
g(clone, "add", "local.txt")
g(clone, "commit", "-q", "-m", "local")
mine = head()
r = up("--yes")
check(r.returncode == 3 and "1 commit(s) ahead of origin/main" in r.stderr and head() == mine,
      "ahead: refused, unchanged", both(r))
write(os.path.join(seed, "README"), "tiny, noted\n")
g(seed, "commit", "-q", "-am", "note")
g(seed, "push", "-q", "origin", "main")
note = g(seed, "rev-parse", "HEAD")
r = up("--yes")
check(r.returncode == 3 and "diverged" in r.stderr and "1 local commit(s) not upstream, 1 upstream"
      in r.stderr and head() == mine and tiny_out().startswith("version=2"),
      "diverged: refused, unchanged", both(r))
g(clone, "reset", "-q", "--hard", v2)

# ---- a build failure, then finishing the rebuild ----
v3 = commit(3, include="#include <torch_stub.h>")
r = up("--yes")
pending = os.path.join(build, "deltafin-upgrade.pending")
check(r.returncode == 5 and "the build failed" in r.stderr, "build failure: exit 5", both(r))
check(("branch main at %s (fast-forwarded from %s)" % (v3, v2)) in r.stderr and
      "NOT rebuilt" in r.stderr and pending in r.stderr and
      ("$ deltafin upgrade --record '%s' --yes" % REC) in r.stderr and
      ("reset --keep %s" % v2) in r.stderr,
      "build failure: the report names both commits, the build state and the recovery", r.stderr)
check(head() == v3 and os.path.exists(pending) and
      open(pending).read() == "from %s\nto %s\n" % (v2, v3) and tiny_out().startswith("version=2"),
      "build failure: checkout at the new commit, marker left, old program kept")
r = up("--yes")
check(r.returncode == 5 and ("at %s (fast-forwarded from %s by an earlier run)" % (v3, v2)) in r.stderr
      and head() == v3 and os.path.exists(pending),
      "rerun before the fix: exit 5 again, the report still names the commit it came from", r.stderr)
r = up("--check")
check(r.returncode == 10 and "did not finish" in r.stdout, "--check: reports the unfinished rebuild",
      both(r))
os.makedirs(os.path.join(torch, "include"))
write(os.path.join(torch, "include", "torch_stub.h"), '#define TORCH_STUB "here"\n')
r = up("--yes")
check(r.returncode == 0 and "did not finish" in r.stdout and head() == v3 and
      tiny_out() == "version=3 " + GOOD + " stub=here" and not os.path.exists(pending),
      "rerun finishes the rebuild with the recorded DF_TORCH_ROOT", both(r) + "\n" + tiny_out())
r = up("--yes")
check(r.returncode == 0 and "already up to date" in r.stdout, "then up to date", both(r))
check(g(origin, "rev-parse", "main") == v3 and note in g(clone, "log", "--format=%H"),
      "the upstream is untouched and the checkout holds its history")
check(os.listdir(home) == [], "HOME (models, caches, keys, state) left empty", os.listdir(home))

# ---- Deltafin's own record, help, errors ----
own = os.path.join(bin_dir, "deltafin-build.json")
orec = json.load(open(own))
onames = {e["name"] for e in orec["cache"]}
check(os.path.realpath(orec["source_dir"]) == os.path.realpath(src_dir) and
      os.path.realpath(orec["build_dir"]) == os.path.realpath(bin_dir) and
      {"CMAKE_BUILD_TYPE", "CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "DF_CUDA", "DF_FUZZ",
       "DF_TORCH_ROOT"} <= onames and not any(n.startswith("DF_TORCH_LIB_") for n in onames),
      "this build folder's record", orec)
r = run([exe, "upgrade", "--help"])
check(r.returncode == 0 and own in r.stdout and "--check" in r.stdout, "upgrade --help names it",
      r.stdout)
r = run([exe, "--help"])
check("upgrade" in r.stdout, "deltafin --help lists upgrade")
r = run([exe, "upgrade", "--record", os.path.join(work, "none.json")])
check(r.returncode == 1 and "cannot use the build record" in r.stderr, "missing record: exit 1",
      both(r))
write(os.path.join(work, "bad.json"), '{"deltafin_build_record": 1, "source_dir": "rel"}')
r = run([exe, "upgrade", "--record", os.path.join(work, "bad.json")])
check(r.returncode == 1 and "absolute path" in r.stderr, "bad record: exit 1 naming the fault",
      both(r))
r = run([exe, "upgrade", "now"])
check(r.returncode == 2, "extra argument: exit 2")
r = run([exe, "upgrade", "--jobs", "0"])
check(r.returncode == 2, "--jobs 0: exit 2")

print("%d failure(s)" % fails)
sys.exit(1 if fails else 0)
