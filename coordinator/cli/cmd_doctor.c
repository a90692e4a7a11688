/* coordinator/cli/cmd_doctor.c — `deltafin doctor [--model DIR] [--state-dir DIR] [--json]`:
 * offline checks of an installation, one line each (`OK|WARN|FAIL  CHECK: FINDING`, and for a
 * WARN or FAIL a `fix:` line saying what to run or change), or with --json one object
 * {"status", "exit_status", "checks": [{check, status, finding, fix}]}.
 *
 * Owns: the checks and their wording. The facts come from their owners: the kernels' ISA
 * (engine/kernels/dispatch.h), libtorch's CUDA view and the CUDA runtime
 * (engine/tensor/torch_shim.h, engine/device/cuda_rt.h), the model's memory plan and host
 * admission (engine/model.h, as `inspect` and `setup`), the pull manifest check
 * (coordinator/hub/verify.h, sizes only), the state directory's files (transport/keys.h,
 * docs/PROTOCOL.md §1) and its coordinator (coordinator/cluster/coord_state.h), discovery
 * (transport/dnssd.h: built in? avahi-daemon reachable over the local D-Bus system bus?).
 * Nothing is written; the only network use is a TCP connect (2 s) to a coordinator the state
 * directory records. Exit status: 0 every check OK, 1 the worst is a WARN, 2 the worst is a
 * FAIL (or a usage error, as in every command).
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cluster/coord_state.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"
#include "coordinator/hub/verify.h"
#include "engine/device/cuda_rt.h"
#include "engine/kernels/dispatch.h"
#include "engine/model.h"
#include "engine/tensor/torch_shim.h"
#include "transport/dnssd.h"
#include "transport/keys.h"

#define PROBE_MS 2000                     /* TCP connect timeout of the cluster check */
#define DISK_MIN ((uint64_t)1 << 30)      /* free bytes below which the disk check warns */

typedef enum { LV_OK = 0, LV_WARN = 1, LV_FAIL = 2 } level;
static const char *lv_name[] = {"OK", "WARN", "FAIL"};

typedef struct report {
  json_t *checks; /* --json: the array being filled; NULL: text lines on stdout */
  level worst;
} report;

/* One check's outcome: a line (and a fix line for WARN/FAIL) or a JSON entry. */
static void emit(report *r, level lv, const char *check, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void emit(report *r, level lv, const char *check, const char *fix, const char *fmt, ...) {
  char finding[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(finding, sizeof finding, fmt, ap);
  va_end(ap);
  if (lv > r->worst) r->worst = lv;
  if (lv == LV_OK) fix = NULL;
  if (r->checks) {
    json_array_append_new(r->checks, json_pack("{s:s, s:s, s:s, s:o}", "check", check, "status",
                                               lv_name[lv], "finding", finding, "fix",
                                               fix ? json_string(fix) : json_null()));
    return;
  }
  printf("%-4s  %s: %s\n", lv_name[lv], check, finding);
  if (fix) printf("      fix: %s\n", fix);
  fflush(stdout);
}

static const char *fmtb(uint64_t n, char *buf, size_t cap) {
  return df_pull_fmt_bytes(n, buf, cap);
}

/* ---- the machine ----------------------------------------------------------------------- */

static void check_isa(report *r) {
  df_isa hw = df_k_isa_hw(), isa = df_k_isa();
  const char *env = getenv("DF_ISA");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
#if defined(__x86_64__)
#ifdef __AVX2__
  const char *bin = "x86-64 build requiring AVX2, kernel paths chosen at run time";
#else
  const char *bin = "x86-64 baseline build with AVX2 / AVX-512 kernel paths chosen at run time";
#endif
#else
  const char *bin = "portable build (no vector kernel paths for this architecture)";
#endif
  char what[512];
  snprintf(what, sizeof what, "kernels run %s (this CPU: %s; %s), %ld CPUs online",
           df_k_isa_name(isa), df_k_isa_name(hw), bin, cpus);
  if (env && *env) {
    int want = !strcmp(env, "scalar") ? DF_ISA_SCALAR
               : !strcmp(env, "avx2") ? DF_ISA_AVX2
               : !strcmp(env, "avx512") ? DF_ISA_AVX512 : -1;
    if (want < 0) {
      emit(r, LV_WARN, "isa", "unset DF_ISA, or set it to scalar, avx2 or avx512",
           "%s; DF_ISA=%s is not scalar, avx2 or avx512 and is ignored", what, env);
      return;
    }
    if (want < (int)hw) {
      emit(r, LV_WARN, "isa", "unset DF_ISA (it is for tests comparing kernel paths)",
           "%s; DF_ISA=%s holds the kernels below what the CPU has: same output, slower", what,
           env);
      return;
    }
  }
  if (hw == DF_ISA_SCALAR) {
#if defined(__x86_64__)
    emit(r, LV_WARN, "isa", "nothing to fix for correctness; a CPU with AVX2 and FMA "
         "(x86-64-v3) runs the vector kernels, several times faster",
         "%s; this CPU has no AVX2 + FMA: the portable C kernels run (same output, slower)",
         what);
#else
    emit(r, LV_WARN, "isa", "nothing to fix for correctness; an x86-64 CPU with AVX2 and FMA "
         "runs the vector kernels, several times faster",
         "%s: the portable C kernels run (same output, slower)", what);
#endif
    return;
  }
  emit(r, LV_OK, "isa", NULL, "%s", what);
}

static void check_libraries(report *r) {
  int ma, mi, pa;
  zmq_version(&ma, &mi, &pa);
  bool curve = zmq_has("curve");
  const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
  bool https = false;
  for (const char *const *p = cv->protocols; p && *p; p++) https |= !strcmp(*p, "https");
  char what[768];
  snprintf(what, sizeof what, "libzmq %d.%d.%d (CURVE %s), libcurl %s (%s), libmicrohttpd %s, "
           "jansson %s, libtorch linked", ma, mi, pa, curve ? "yes" : "no", cv->version,
           cv->ssl_version ? cv->ssl_version : "no TLS", MHD_get_version(), JANSSON_VERSION);
  if (!curve) {
    emit(r, LV_FAIL, "libraries", "install a libzmq built with CURVE (libsodium), e.g. with "
         "tools/install-deps.sh, and rebuild",
         "%s: without CURVE no cluster can start (every cluster byte is CURVE-encrypted)", what);
    return;
  }
  if (!https) {
    emit(r, LV_WARN, "libraries", "install a libcurl with TLS (tools/install-deps.sh) and "
         "rebuild", "%s: this libcurl has no https, so deltafin pull cannot reach the hub", what);
    return;
  }
  emit(r, LV_OK, "libraries", NULL, "%s", what);
}

static void check_cuda(report *r) {
  bool rt = df_cuda_compiled(), torch_cuda = df_t_cuda_available();
  int n = torch_cuda ? df_t_cuda_device_count() : 0;
  char rterr[256] = "";
  if (!torch_cuda || n == 0) {
    if (rt) df_cuda_device_count(rterr, sizeof rterr);
    emit(r, LV_OK, "cuda", NULL,
         "no usable CUDA device: this build's libtorch has no usable CUDA (a CPU-only "
         "libtorch, or no driver/device)%s%s%s; --device cuda and auto run on the CPU, the "
         "default (docs/GPU.md)", rt ? "; CUDA runtime built in (DF_CUDA=ON)" : "",
         rterr[0] ? ": " : "", rterr);
    return;
  }
  if (!rt) {
    emit(r, LV_WARN, "cuda", "rebuild with -DDF_CUDA=ON (docs/GPU.md, Building with CUDA)",
         "libtorch sees %d CUDA device%s, but this build has no CUDA runtime (DF_CUDA=OFF): "
         "--device cuda cannot measure free device memory and runs on the CPU", n,
         n == 1 ? "" : "s");
    return;
  }
  char line[1024];
  size_t o = 0;
  for (int d = 0; d < n && d < 8 && o < sizeof line; d++) {
    uint64_t fr = 0, tot = 0;
    char e[256], a[32], b[32];
    if (df_cuda_mem_info(d, &fr, &tot, e, sizeof e) != 0) {
      emit(r, LV_WARN, "cuda", "check the driver (nvidia-smi) and that no other process holds "
           "the device", "cuda:%d: %s", d, e);
      return;
    }
    o += (size_t)snprintf(line + o, sizeof line - o, "%scuda:%d %s free of %s", d ? ", " : "", d,
                          fmtb(fr, a, sizeof a), fmtb(tot, b, sizeof b));
  }
  emit(r, LV_OK, "cuda", NULL, "%d device%s: %s; --device cuda runs there after admission "
       "(docs/GPU.md)", n, n == 1 ? "" : "s", line);
}

/* ---- the model ------------------------------------------------------------------------- */

typedef struct vsum {
  int problems;
  char first[1024];  /* the first problem, "path: message" */
  char tensors[256]; /* the "N tensors in M safetensors files match config.json" finding */
  char tok[256];     /* the tokenizer's finding */
} vsum;

static void on_verify(void *ud, df_verify_level lvl, const char *path, const char *msg) {
  vsum *v = ud;
  if (lvl == DF_VERIFY_PROBLEM && !v->problems++)
    snprintf(v->first, sizeof v->first, "%s%s%s", path, *path ? ": " : "", msg);
  if (lvl == DF_VERIFY_OK && !*path && strstr(msg, "match config.json"))
    snprintf(v->tensors, sizeof v->tensors, "%s", msg);
  if (lvl == DF_VERIFY_OK && (!strcmp(path, "tokenizer.json") || !strcmp(path, "tiktoken.model")))
    snprintf(v->tok, sizeof v->tok, "%s %s", path, msg);
}

/* The folder against its pull manifest (sizes only) and its structure; true when it loads. */
static bool check_model(report *r, const char *dir) {
  struct stat st;
  char fix[4400];
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(fix, sizeof fix, "give --model the folder of a model (deltafin pull ORG/NAME "
             "downloads one into ~/.cache/deltafin/models/)");
    emit(r, LV_FAIL, "model", fix, "%s %s", dir,
         stat(dir, &st) != 0 ? "does not exist" : "is not a folder");
    return false;
  }
  vsum v = {0};
  df_verify_opts vo = {.skip_hashes = true, .report = on_verify, .ud = &v};
  df_verify_result res;
  char err[1024];
  if (df_verify_dir(dir, &vo, &res, err, sizeof err) != 0) {
    emit(r, LV_FAIL, "model", "give --model a readable model folder", "%s", err);
    return false;
  }
  if (res.problems) {
    snprintf(fix, sizeof fix, "deltafin verify %s lists every problem; deltafin pull ORG/NAME "
             "again resumes and re-fetches what is missing or wrong", dir);
    emit(r, LV_FAIL, "model", fix, "%s: %d problem%s, the first: %s", dir, res.problems,
         res.problems == 1 ? "" : "s", v.first);
    return false;
  }
  if (!v.tok[0]) { /* verify checks a tokenizer when present; run and serve need one */
    snprintf(fix, sizeof fix, "copy the model's tokenizer.json (with tokenizer_config.json) "
             "into %s, or deltafin pull ORG/NAME again", dir);
    emit(r, LV_FAIL, "model", fix, "%s: no tokenizer.json (or tiktoken.model): deltafin run "
         "and serve need it", dir);
    return true; /* the weights load: memory can still be sized */
  }
  char tail[600];
  snprintf(tail, sizeof tail, "%s%s%s", v.tensors[0] ? v.tensors : "weights load",
           v.tok[0] ? "; " : "", v.tok);
  if (res.has_manifest)
    emit(r, LV_OK, "model", NULL, "%s: %d files match the sizes in its pull manifest "
         "(SHA-256 not read: deltafin verify checks them); %s", dir, res.files_checked, tail);
  else
    emit(r, LV_OK, "model", NULL, "%s: no pull manifest (not pulled by deltafin), nothing to "
         "compare sizes with; %s", dir, tail);
  return true;
}

static void check_memory(report *r, const char *dir) {
  df_model *m = NULL;
  df_model_opts mo = {.max_ctx = 1, .max_rows = 1};
  char err[1024], a[32], b[32], c[32], d[32];
  if (df_model_load(dir, &mo, &m, err, sizeof err) != 0) {
    emit(r, LV_FAIL, "memory", "deltafin verify DIR names what is wrong with the folder",
         "cannot load %s to size it: %s", dir, err);
    return;
  }
  df_model_bytes mb = df_model_memory(m);
  int64_t total = df_host_mem_total(), avail = df_host_mem_available();
  if (df_model_admit_host(m, err, sizeof err) != 0) {
    char fix[256];
    snprintf(fix, sizeof fix, "run it on a machine with at least %s of memory (the resident "
             "part must fit on the coordinator; routed experts can live on df-nodes, "
             "docs/CLUSTER.md)", fmtb(mb.resident, a, sizeof a));
    emit(r, LV_FAIL, "memory", fix, "%s", err);
  } else if (total <= 0 || avail < 0) {
    emit(r, LV_WARN, "memory", "check that /proc/meminfo is readable",
         "resident part %s, routed experts %s; this machine's memory is unreadable "
         "(/proc/meminfo)", fmtb(mb.resident, a, sizeof a), fmtb(mb.experts, b, sizeof b));
  } else if (mb.resident > (uint64_t)avail) {
    emit(r, LV_WARN, "memory", "stop other programs to free memory, or use a machine with more",
         "the resident part (%s, read on every token) is more than the %s available now (of "
         "%s): it would be paged in and out", fmtb(mb.resident, a, sizeof a),
         fmtb((uint64_t)avail, b, sizeof b), fmtb((uint64_t)total, c, sizeof c));
  } else {
    bool all = mb.resident + mb.experts <= (uint64_t)avail;
    emit(r, LV_OK, "memory", NULL, "resident part %s + routed experts %s; %s available of %s: "
         "%s", fmtb(mb.resident, a, sizeof a), fmtb(mb.experts, b, sizeof b),
         fmtb((uint64_t)avail, c, sizeof c), fmtb((uint64_t)total, d, sizeof d),
         all ? "the whole model fits in memory"
             : "the resident part fits; routed experts are read from disk as they are used");
  }
  df_model_destroy(&m);
}

static uint64_t g_du; /* nftw has no user pointer */
static int du_add(const char *p, const struct stat *st, int flag, struct FTW *f) {
  if (flag == FTW_F) g_du += (uint64_t)st->st_blocks * 512;
  return 0;
}

static void check_disk(report *r, const char *dir) {
  struct statvfs vf;
  char a[32], b[32], c[32], d[32];
  if (statvfs(dir, &vf) != 0) {
    emit(r, LV_WARN, "disk", "check the folder's filesystem", "statvfs %s: %s", dir,
         strerror(errno));
    return;
  }
  uint64_t fr = (uint64_t)vf.f_bavail * vf.f_frsize, tot = (uint64_t)vf.f_blocks * vf.f_frsize;
  df_pull_manifest man;
  char merr[512];
  bool stream = df_pull_manifest_read(dir, &man, merr, sizeof merr) == 0 && man.stream;
  uint64_t budget = stream ? man.cache_budget : 0;
  if (stream) df_pull_manifest_free(&man);
  const char *eb = getenv("DELTAFIN_STREAM_BUDGET");
  uint64_t ev;
  if (stream && eb && *eb && df_pull_parse_bytes(eb, &ev) == 0) budget = ev;
  if (stream) {
    char cdir[4200];
    snprintf(cdir, sizeof cdir, "%s/.deltafin/experts", dir);
    g_du = 0;
    nftw(cdir, du_add, 16, FTW_PHYS);
    uint64_t grow = budget > g_du ? budget - g_du : 0;
    if (fr < grow) {
      emit(r, LV_WARN, "disk", "free disk space there, or lower the cache budget "
           "(DELTAFIN_STREAM_BUDGET=SIZE, or pull --cache-budget)",
           "%s free of %s on the filesystem of %s, but its stream-mode expert cache (%s used) "
           "may grow by %s more", fmtb(fr, a, sizeof a), fmtb(tot, b, sizeof b), dir,
           fmtb(g_du, c, sizeof c), fmtb(grow, d, sizeof d));
      return;
    }
    emit(r, LV_OK, "disk", NULL, "%s free of %s on the filesystem of %s: room for the rest of "
         "its stream-mode expert cache (%s more)", fmtb(fr, a, sizeof a), fmtb(tot, b, sizeof b),
         dir, fmtb(grow, c, sizeof c));
    return;
  }
  if (fr < DISK_MIN) {
    emit(r, LV_WARN, "disk", "free disk space on that filesystem",
         "only %s free of %s on the filesystem of %s (pulls, resumed downloads and expert "
         "caches need room)", fmtb(fr, a, sizeof a), fmtb(tot, b, sizeof b), dir);
    return;
  }
  emit(r, LV_OK, "disk", NULL, "%s free of %s on the filesystem of %s", fmtb(fr, a, sizeof a),
       fmtb(tot, b, sizeof b), dir);
}

/* ---- the state directory --------------------------------------------------------------- */

typedef struct perm {
  level lv;
  char finding[1536]; /* "; "-separated problems */
  char fix600[2048];  /* paths to chmod 600 */
  char fix700[2048];  /* folders to chmod 700 */
  char other[4600];   /* any other fix */
} perm;

static void perm_add(perm *p, level lv, const char *chmod, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void perm_add(perm *p, level lv, const char *chmod, const char *path, const char *fmt, ...) {
  if (lv > p->lv) p->lv = lv;
  size_t n = strlen(p->finding);
  if (n + 4 < sizeof p->finding) {
    if (n) n += (size_t)snprintf(p->finding + n, sizeof p->finding - n, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->finding + n, sizeof p->finding - n, fmt, ap);
    va_end(ap);
  }
  char *f = chmod && !strcmp(chmod, "600") ? p->fix600 : chmod ? p->fix700 : NULL;
  size_t cap = chmod && !strcmp(chmod, "600") ? sizeof p->fix600 : sizeof p->fix700;
  if (f && strlen(f) + strlen(path) + 2 < cap) {
    strcat(f, " ");
    strcat(f, path);
  }
}

static bool is_trust_file(const char *name) {
  return !strcmp(name, "nodes") || !strcmp(name, "tokens") || !strcmp(name, "revoked") ||
         !strcmp(name, "coordinator");
}

/* One state directory's ownership and modes (docs/PROTOCOL.md §1: folders 0700, files 0600;
 * a key file others can read is refused, a nodes / tokens file others can write ignored). */
static void check_state_dir(report *r, const char *check, const char *dir) {
  struct stat st;
  char fix[4800];
  if (lstat(dir, &st) != 0) {
    if (errno == ENOENT)
      emit(r, LV_OK, check, NULL, "%s does not exist yet (created with mode 700 on first use, "
           "e.g. by deltafin cluster init)", dir);
    else
      emit(r, LV_FAIL, check, "check the path given to --state-dir", "%s: %s", dir,
           strerror(errno));
    return;
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    snprintf(fix, sizeof fix, "give --state-dir a real folder (not a link), or replace %s by "
             "one with mode 700", dir);
    emit(r, LV_FAIL, check, fix, "%s is %s: the coordinator and df-node refuse it", dir,
         S_ISLNK(st.st_mode) ? "a symbolic link" : "not a folder");
    return;
  }
  if (st.st_uid != geteuid()) {
    emit(r, LV_FAIL, check, "use a state directory of your own (--state-dir DIR)",
         "%s belongs to another user (uid %u): the coordinator and df-node refuse it", dir,
         (unsigned)st.st_uid);
    return;
  }
  perm p = {0};
  if (st.st_mode & 022)
    perm_add(&p, LV_FAIL, "700", dir, "the folder is writable by group or others (mode %03o): "
             "refused", (unsigned)(st.st_mode & 0777));
  else if (st.st_mode & 077)
    perm_add(&p, LV_WARN, "700", dir, "the folder is open to group or others (mode %03o)",
             (unsigned)(st.st_mode & 0777));
  DIR *d = opendir(dir);
  int n_files = 0;
  bool node = false;
  char keys[256] = "";
  for (struct dirent *de; d && (de = readdir(d));) {
    const char *nm = de->d_name;
    if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, nm);
    struct stat fs;
    if (lstat(path, &fs) != 0) continue;
    size_t nl = strlen(nm);
    bool key = nl > 4 && !strcmp(nm + nl - 4, ".key");
    node |= !strcmp(nm, "node.key") || !strcmp(nm, "coordinator");
    unsigned mode = (unsigned)(fs.st_mode & 0777);
    if (S_ISDIR(fs.st_mode)) { /* heat/, manifests/, cache/ */
      if (fs.st_uid != geteuid()) {
        perm_add(&p, LV_WARN, NULL, path, "%s/ is another user's (uid %u)", nm,
                 (unsigned)fs.st_uid);
        snprintf(p.other, sizeof p.other, "remove %s or make it yours, mode 700", path);
      } else if (fs.st_mode & 022) {
        perm_add(&p, LV_WARN, "700", path, "%s/ is writable by group or others (mode %03o)", nm,
                 mode);
      }
      continue;
    }
    n_files++;
    if (key || is_trust_file(nm)) {
      if (S_ISLNK(fs.st_mode) || !S_ISREG(fs.st_mode) || fs.st_uid != geteuid()) {
        perm_add(&p, LV_FAIL, NULL, path, "%s is %s: not trusted, %s", nm,
                 S_ISLNK(fs.st_mode) ? "a symbolic link" : !S_ISREG(fs.st_mode)
                     ? "not a regular file" : "another user's", key ? "refused" : "ignored");
        snprintf(p.other, sizeof p.other, "replace %s by a regular file of your own, mode 600",
                 path);
      } else if (key && (fs.st_mode & 077)) {
        perm_add(&p, LV_FAIL, "600", path, "%s has mode %03o: group or others can read the "
                 "secret key, so it is refused", nm, mode);
      } else if (fs.st_mode & 022) {
        perm_add(&p, LV_FAIL, "600", path, "%s has mode %03o: writable by group or others, so "
                 "it is ignored", nm, mode);
      } else if (fs.st_mode & 077) {
        perm_add(&p, LV_WARN, "600", path, "%s has mode %03o: readable by group or others", nm,
                 mode);
      }
      if (key && strlen(keys) + nl + 3 < sizeof keys)
        snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", keys[0] ? ", " : "", nm);
    } else if (S_ISREG(fs.st_mode) && (fs.st_mode & 077)) {
      perm_add(&p, LV_WARN, "600", path, "%s has mode %03o (files here are written 600)", nm,
               mode);
    }
  }
  if (d) closedir(d);
  else perm_add(&p, LV_FAIL, NULL, dir, "the folder cannot be read: %s", strerror(errno));
  const char *kind = node ? "a df-node state directory" : "a coordinator state directory";
  if (p.lv == LV_OK) {
    emit(r, LV_OK, check, NULL, "%s (%s): mode %03o, yours; %d file%s, none open to group or "
         "others%s%s", dir, kind, (unsigned)(st.st_mode & 0777), n_files, n_files == 1 ? "" : "s",
         keys[0] ? "; keys: " : "", keys);
    return;
  }
  size_t o = 0;
  fix[0] = 0;
  if (p.fix600[0]) o += (size_t)snprintf(fix + o, sizeof fix - o, "chmod 600%s", p.fix600);
  if (p.fix700[0] && o < sizeof fix)
    o += (size_t)snprintf(fix + o, sizeof fix - o, "%schmod 700%s", o ? "; " : "", p.fix700);
  if (p.other[0] && o < sizeof fix)
    snprintf(fix + o, sizeof fix - o, "%s%s", o ? "; " : "", p.other);
  emit(r, p.lv, check, fix, "%s (%s): %s", dir, kind, p.finding);
}

/* The cluster a state directory records: a coordinator's (running? reachable?) or, for a
 * df-node's, the coordinator it pinned (reachable?). */
static void check_cluster(report *r, const char *check, const char *dir) {
  char p[4200], err[256], host[320], fix[600];
  int port = 0;
  snprintf(p, sizeof p, "%s/coordinator", dir);
  FILE *f = fopen(p, "r");
  if (f) { /* a df-node's: "<coordinator public Z85>[ tcp://HOST:PORT]" */
    char key[64] = "", addr[300] = "", fp[17], why[512];
    int got = fscanf(f, "%63s %299s", key, addr), ok = got == 2;
    fclose(f);
    if (got == 1 && strlen(key) == DF_PROTO_Z85_KEY) { /* joined without an address */
      df_proto_key_fingerprint(key, fp);
      if (df_proto_dnssd_probe(why, sizeof why) == 0)
        emit(r, LV_OK, check, NULL, "this node's coordinator (key %s) has no recorded address: "
             "df-node finds it by discovery (%s)", fp, why);
      else
        emit(r, LV_WARN, check, "start avahi-daemon here and on the coordinator, or give the "
             "address: df-node join HOST:PORT", "this node's coordinator (key %s) has no "
             "recorded address, and discovery is unavailable: %s", fp, why);
      return;
    }
    /* df-node records "tcp://HOST:PORT" (node/target.c); older files may lack the scheme */
    char *hp = strncmp(addr, "tcp://", 6) ? addr : addr + 6;
    char *colon = ok ? strrchr(hp, ':') : NULL;
    if (!colon || colon == hp || (port = atoi(colon + 1)) <= 0 || port > 65535) {
      emit(r, LV_WARN, check, "join again with a token: df-node join HOST:PORT --token-file F",
           "%s records no usable coordinator address", p);
      return;
    }
    *colon = 0;
    snprintf(host, sizeof host, "%s", hp[0] == '[' ? hp + 1 : hp);
    if (host[0] && host[strlen(host) - 1] == ']') host[strlen(host) - 1] = 0;
    df_proto_key_fingerprint(key, fp);
    if (df_coord_tcp_probe(host, port, PROBE_MS, err, sizeof err) != 0) {
      snprintf(fix, sizeof fix, "start the coordinator (deltafin serve --cluster or run "
               "--cluster) or check the address and firewall; df-node keeps retrying by itself");
      emit(r, LV_WARN, check, fix, "this node's coordinator %s:%d (key %s) cannot be reached: %s",
           host, port, fp, err);
      return;
    }
    emit(r, LV_OK, check, NULL, "this node's coordinator %s:%d (key %s) accepts connections",
         host, port, fp);
    return;
  }
  df_coord_state cs;
  df_coord_state_read(dir, &cs, NULL);
  int allowed = 0;
  snprintf(p, sizeof p, "%s/nodes", dir);
  if ((f = fopen(p, "r"))) {
    char line[512], k[64], nm[128];
    while (fgets(line, sizeof line, f)) allowed += sscanf(line, "%63s %127s", k, nm) == 2;
    fclose(f);
  }
  char who[64] = "";
  if (cs.pid > 0)
    snprintf(who, sizeof who, "pid %ld%s%s", cs.pid, cs.command[0] ? ", " : "", cs.command);
  if (!cs.running) {
    if (!cs.has_status && !allowed) {
      emit(r, LV_OK, check, NULL, "no cluster configured in %s (no node allow-listed, no "
           "coordinator has run)", dir);
      return;
    }
    emit(r, LV_OK, check, NULL, "%d node key%s allow-listed; no coordinator running%s%s%s",
         allowed, allowed == 1 ? "" : "s", who[0] ? " (last: " : "", who, who[0] ? ")" : "");
    return;
  }
  if (!cs.endpoint[0] || df_coord_endpoint_local(cs.endpoint, host, sizeof host, &port) != 0) {
    emit(r, LV_OK, check, NULL, "coordinator running (%s), its status not written yet", who);
    return;
  }
  if (df_coord_tcp_probe(host, port, PROBE_MS, err, sizeof err) != 0) {
    snprintf(fix, sizeof fix, "check --cluster-bind / --cluster-port of the coordinator (pid "
             "%ld) and the firewall", cs.pid);
    emit(r, LV_FAIL, check, fix, "coordinator running (%s) on %s, but %s:%d cannot be reached: "
         "%s", who, cs.endpoint, host, port, err);
    return;
  }
  emit(r, LV_OK, check, NULL, "coordinator running (%s), accepting on %s:%d; %d of %d node%s "
       "ready, %d allow-listed", who, host, port, cs.nodes_ready, cs.nodes,
       cs.nodes == 1 ? "" : "s", allowed);
}

/* mDNS/DNS-SD discovery of the coordinator (transport/dnssd.h). Optional: without it nodes
 * are given the coordinator's address, so the check is OK either way and says which. */
static void check_discovery(report *r) {
  char msg[512];
  if (!df_proto_dnssd_compiled()) {
    emit(r, LV_OK, "discovery", NULL, "unavailable: not built in (libavahi-client-dev was "
         "missing at build time): a --cluster coordinator is not announced and df-node join "
         "needs HOST:PORT; install libavahi-client-dev and rebuild to have it");
    return;
  }
  if (df_proto_dnssd_probe(msg, sizeof msg) != 0) {
    emit(r, LV_OK, "discovery", NULL, "unavailable: %s: a --cluster coordinator is not "
         "announced and df-node join needs HOST:PORT (or the address it recorded); start "
         "avahi-daemon to have it", msg);
    return;
  }
  emit(r, LV_OK, "discovery", NULL, "%s reachable: a --cluster coordinator announces %s, and "
       "df-node join without HOST:PORT finds the one its token pins", msg, DF_PROTO_DNSSD_TYPE);
}

/* ---- the command ----------------------------------------------------------------------- */

static void doctor_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin doctor [--model DIR] [--state-dir DIR] [--json]\n"
          "  offline checks of this installation, one line each:\n"
          "    OK|WARN|FAIL  CHECK: FINDING   (and for WARN / FAIL a 'fix:' line)\n"
          "  isa        the kernels' instruction set (CPU, DF_ISA), the binary, CPUs\n"
          "  libraries  libzmq (CURVE), libcurl (TLS), libmicrohttpd, jansson, libtorch\n"
          "  cuda       libtorch's CUDA and the CUDA runtime (no GPU needed)\n"
          "  model      the folder against its pull manifest (sizes; no hashing) and that\n"
          "             config, weights and tokenizer load\n"
          "  memory     the resident part against this machine's memory\n"
          "  disk       free space on the model folder's filesystem\n"
          "  state-dir  ownership and modes (folder 700, files 600, key files refused\n"
          "             otherwise)\n"
          "  cluster    the coordinator the state directory records: running? reachable\n"
          "             (a TCP connect, 2 s)? For a df-node's state directory, its\n"
          "             coordinator's address\n"
          "  discovery  mDNS/DNS-SD of the coordinator: built in? avahi-daemon running?\n"
          "  --model DIR      model folder (default: the bundled demo model, as run uses)\n"
          "  --state-dir DIR  default ~/.local/state/deltafin, and ~/.local/state/deltafin-node\n"
          "                   too when it exists\n"
          "  --json           one object: {status, exit_status, checks: [{check, status,\n"
          "                   finding, fix}]} (fix null for OK)\n"
          "  exit status: 0 all OK, 1 the worst is WARN, 2 the worst is FAIL (or usage error)\n");
}

int df_cmd_doctor(int argc, char **argv) {
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"state-dir", required_argument, 0, 's'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *model = NULL, *state_arg = NULL;
  bool json = false;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm':
      if (!optarg[0]) {
        fprintf(stderr, "deltafin doctor: --model: expected a folder path, got ''\n");
        return 2;
      }
      model = optarg;
      break;
    case 's':
      if (df_cli_dir("state-dir", optarg)) return 2;
      state_arg = optarg;
      break;
    case 'j': json = true; break;
    case 'h': doctor_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin doctor: unknown or incomplete option '%s'\n", argv[optind - 1]);
      doctor_usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "deltafin doctor: unexpected argument '%s'\n", argv[optind]);
    doctor_usage(stderr);
    return 2;
  }
  report r = {.checks = json ? json_array() : NULL};
  check_isa(&r);
  check_libraries(&r);
  check_cuda(&r);
  const char *dir = model ? model : df_cli_default_model();
  char cfg[4300];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  if (!model && access(cfg, R_OK) != 0) {
    emit(&r, LV_OK, "model", NULL, "skipped: no --model given and the bundled demo model %s is "
         "not there", dir);
  } else {
    if (check_model(&r, dir)) check_memory(&r, dir);
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) check_disk(&r, dir);
  }
  char state[4096], node_state[4096], err[512];
  if (state_arg) {
    snprintf(state, sizeof state, "%s", state_arg);
    check_state_dir(&r, "state-dir", state);
    check_cluster(&r, "cluster", state);
  } else if (df_proto_state_default("deltafin", state, sizeof state, err, sizeof err) != 0) {
    emit(&r, LV_WARN, "state-dir", "set HOME (or XDG_STATE_HOME), or give --state-dir DIR",
         "%s", err);
  } else {
    check_state_dir(&r, "state-dir", state);
    check_cluster(&r, "cluster", state);
    struct stat st;
    if (df_proto_state_default("deltafin-node", node_state, sizeof node_state, err,
                               sizeof err) == 0 && lstat(node_state, &st) == 0) {
      check_state_dir(&r, "node-state-dir", node_state);
      check_cluster(&r, "node-cluster", node_state);
    }
  }
  check_discovery(&r);
  int rc = (int)r.worst;
  if (json) {
    json_t *o = json_pack("{s:s, s:i, s:o}", "status", lv_name[r.worst], "exit_status", rc,
                          "checks", r.checks);
    json_dumpf(o, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(o);
  }
  return rc;
}
