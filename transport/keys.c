/* transport/keys.c — keypairs, join tokens, allow-list, crypto helpers; see keys.h. */
#define _GNU_SOURCE
#include "transport/keys.h"

#include "config/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#define SHA_START(c) mbedtls_sha256_starts((c), 0)
#define SHA_UPDATE mbedtls_sha256_update
#define SHA_FINISH mbedtls_sha256_finish
#define SHA_ONESHOT mbedtls_sha256
#else
#define SHA_START(c) mbedtls_sha256_starts_ret((c), 0)
#define SHA_UPDATE mbedtls_sha256_update_ret
#define SHA_FINISH mbedtls_sha256_finish_ret
#define SHA_ONESHOT mbedtls_sha256_ret
#endif

_Static_assert(sizeof(mbedtls_sha256_context) <= sizeof(((df_proto_sha256_ctx *)0)->opaque),
               "df_proto_sha256_ctx too small");

/* ---- helpers ----------------------------------------------------------------------- */

void df_proto_sha256(const void *buf, size_t len, uint8_t out[32]) {
  SHA_ONESHOT(buf, len, out, 0);
}

void df_proto_sha256_init(df_proto_sha256_ctx *c) {
  mbedtls_sha256_context *s = (mbedtls_sha256_context *)c->opaque;
  mbedtls_sha256_init(s);
  SHA_START(s);
}
void df_proto_sha256_update(df_proto_sha256_ctx *c, const void *buf, size_t len) {
  SHA_UPDATE((mbedtls_sha256_context *)c->opaque, buf, len);
}
void df_proto_sha256_final(df_proto_sha256_ctx *c, uint8_t out[32]) {
  mbedtls_sha256_context *s = (mbedtls_sha256_context *)c->opaque;
  SHA_FINISH(s, out);
  mbedtls_sha256_free(s);
}

void df_proto_hex(const uint8_t *b, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[b[i] >> 4];
    out[2 * i + 1] = d[b[i] & 15];
  }
  out[2 * n] = 0;
}

static int unhex(const char *s, size_t n, uint8_t *out) {
  for (size_t i = 0; i < n; i++) {
    int v = 0;
    for (int j = 0; j < 2; j++) {
      char c = s[2 * i + j];
      int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (x < 0) return -1;
      v = v * 16 + x;
    }
    out[i] = (uint8_t)v;
  }
  return 0;
}

bool df_proto_ct_equal(const void *a, const void *b, size_t n) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t acc = 0;
  for (size_t i = 0; i < n; i++) acc |= (uint8_t)(x[i] ^ y[i]);
  return acc == 0;
}

int df_proto_random(uint8_t *out, size_t n, char *err, size_t errlen) {
  mbedtls_entropy_context ent;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_entropy_init(&ent);
  mbedtls_ctr_drbg_init(&drbg);
  static const char pers[] = "deltafin-join-token";
  int rc = -1;
  if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, (const unsigned char *)pers,
                            sizeof pers - 1) != 0 ||
      mbedtls_ctr_drbg_random(&drbg, out, n) != 0) {
    snprintf(err, errlen, "random: CTR-DRBG could not be seeded from the entropy source");
    goto done;
  }
  rc = 0;
done:
  mbedtls_ctr_drbg_free(&drbg);
  mbedtls_entropy_free(&ent);
  return rc;
}

int df_proto_write_atomic(const char *path, const void *data, size_t len, int mode, char *err,
                          size_t errlen) {
  return df_fs_write_atomic(path, data, len, mode, err, errlen);
}

/* Read a whole small file (< 16 MiB) of the state directory into a NUL-terminated malloc'd
 * buffer; NULL when it does not exist (errno ENOENT) or cannot be read. A file that others
 * could have written — a symlink, not a regular file, not owned by this user, or writable by
 * group or others — is not trusted: NULL with errno EPERM and one line on stderr saying why
 * (the keys, tokens and allow-list decide who may join). */
static char *slurp(const char *path, size_t *len_out) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ELOOP) {
      fprintf(stderr, "deltafin: %s is a symbolic link: not trusted, ignored\n", path);
      errno = EPERM;
    }
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 022)) {
    bool reg = S_ISREG(st.st_mode);
    fprintf(stderr, "deltafin: %s %s: not trusted, ignored%s\n", path,
            !reg ? "is not a regular file"
            : st.st_uid != geteuid() ? "belongs to another user"
                                     : "is writable by group or others",
            reg && st.st_uid == geteuid() ? " (chmod 600 it)" : "");
    close(fd);
    errno = EPERM;
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return NULL;
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      if (cap > (16u << 20)) goto fail;
      char *nb = realloc(buf, cap);
      if (!nb) goto fail;
      buf = nb;
    }
    size_t r = fread(buf + len, 1, 4096, f);
    len += r;
    if (r < 4096) break;
  }
  if (ferror(f)) goto fail;
  fclose(f);
  buf[len] = 0;
  if (len_out) *len_out = len;
  return buf;
fail:
  free(buf);
  fclose(f);
  return NULL;
}

/* flock STATE/.lock; returns the fd (>= 0) or -1. */
static int lock_state(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/.lock", dir);
  int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  return fd;
}
static void unlock_state(int fd) {
  if (fd >= 0) close(fd); /* closing releases the flock */
}

/* ---- state dir, keys --------------------------------------------------------------- */

int df_proto_state_default(const char *kind, char *out, size_t cap, char *err, size_t errlen) {
  const char *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
  int n;
  if (x && x[0]) n = snprintf(out, cap, "%s/%s", x, kind);
  else if (h && h[0]) n = snprintf(out, cap, "%s/.local/state/%s", h, kind);
  else {
    snprintf(err, errlen, "no state directory: set HOME or pass --state-dir");
    return -1;
  }
  if (n < 0 || (size_t)n >= cap) {
    snprintf(err, errlen, "state directory path too long");
    return -1;
  }
  return 0;
}

int df_proto_state_mkdir(const char *dir, char *err, size_t errlen) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
    snprintf(err, errlen, "path too long: %s", dir);
    return -1;
  }
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == 0) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create directory %s: %s", p, strerror(errno));
        return -1;
      }
      *s = c;
      if (!c) break;
    }
  }
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s is not a directory", dir);
    return -1;
  }
  /* keys, tokens and the allow-list live here: nobody else may be able to replace them */
  if (st.st_uid != geteuid() || (st.st_mode & 022)) {
    snprintf(err, errlen, "state directory %s %s (mode %03o); it holds keys and the allow-list: "
             "chmod 700 it", dir, st.st_uid != geteuid() ? "belongs to another user"
                                                         : "is writable by group or others",
             (unsigned)(st.st_mode & 0777));
    return -1;
  }
  return 0;
}

static bool z85_key_ok(const char *s, size_t n) {
  uint8_t raw[32];
  char tmp[DF_PROTO_Z85_KEY + 1];
  if (n != DF_PROTO_Z85_KEY) return false;
  memcpy(tmp, s, n);
  tmp[n] = 0;
  return zmq_z85_decode(raw, tmp) != NULL;
}

int df_proto_keys_load(const char *path, bool create, df_proto_keypair *kp, bool *created,
                       char *err, size_t errlen) {
  memset(kp, 0, sizeof *kp);
  if (created) *created = false;
  size_t len;
  char *txt = slurp(path, &len);
  if (!txt) {
    if (errno != ENOENT || !create) {
      snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
      return -1;
    }
    if (zmq_curve_keypair(kp->pub, kp->sec) != 0) {
      snprintf(err, errlen, "libzmq has no CURVE support (zmq_curve_keypair: %s)",
               zmq_strerror(zmq_errno()));
      return -1;
    }
    char buf[128];
    int n = snprintf(buf, sizeof buf, "public %s\nsecret %s\n", kp->pub, kp->sec);
    if (df_proto_write_atomic(path, buf, (size_t)n, 0600, err, errlen) != 0) return -1;
    if (created) *created = true;
    return 0;
  }
  struct stat st;
  int rc = -1;
  if (stat(path, &st) == 0 && (st.st_mode & 077)) {
    snprintf(err, errlen, "key file %s is readable by others (mode %03o); chmod 600 it", path,
             (unsigned)(st.st_mode & 0777));
    goto done;
  }
  char pub[64], sec[64];
  if (sscanf(txt, "public %63s secret %63s", pub, sec) != 2 || !z85_key_ok(pub, strlen(pub)) ||
      !z85_key_ok(sec, strlen(sec))) {
    snprintf(err, errlen, "key file %s is malformed (expected 'public Z85' and 'secret Z85' lines)",
             path);
    goto done;
  }
  memcpy(kp->pub, pub, DF_PROTO_Z85_KEY + 1);
  memcpy(kp->sec, sec, DF_PROTO_Z85_KEY + 1);
  rc = 0;
done:
  free(txt);
  return rc;
}

void df_proto_key_fingerprint(const char *pub_z85, char out[17]) {
  uint8_t raw[32], h[32];
  memset(raw, 0, sizeof raw);
  zmq_z85_decode(raw, pub_z85);
  df_proto_sha256(raw, 32, h);
  df_proto_hex(h, 8, out);
}

int df_proto_z85_to_hex(const char *z85, char hex[65]) {
  uint8_t raw[32];
  if (!z85_key_ok(z85, strlen(z85)) || !zmq_z85_decode(raw, z85)) return -1;
  df_proto_hex(raw, 32, hex);
  return 0;
}

int df_proto_hex_to_z85(const char *hex, size_t hexlen, char z85[DF_PROTO_Z85_KEY + 1]) {
  uint8_t raw[32];
  if (hexlen != 64 || unhex(hex, 32, raw) != 0) return -1;
  return zmq_z85_encode(z85, raw, 32) ? 0 : -1;
}

/* ---- tokens ------------------------------------------------------------------------ */

typedef struct tok_entry {
  char digest[65];
  int64_t expiry;
  int reusable, used;
  char join[DF_PROTO_Z85_KEY + 1]; /* the token's join key (Z85); "" in entries from before */
} tok_entry;

/* Parse STATE/tokens into a malloc'd array; *n entries. Malformed lines are skipped. */
static tok_entry *tokens_read(const char *dir, int *n) {
  char p[4200];
  snprintf(p, sizeof p, "%s/tokens", dir);
  *n = 0;
  char *txt = slurp(p, NULL);
  if (!txt) return NULL;
  int cap = 16;
  tok_entry *v = malloc((size_t)cap * sizeof *v);
  char *save = NULL;
  for (char *line = strtok_r(txt, "\n", &save); v && line; line = strtok_r(NULL, "\n", &save)) {
    tok_entry e;
    long long ex;
    e.join[0] = 0;
    int got = sscanf(line, "%64s %lld %d %d %40s", e.digest, &ex, &e.reusable, &e.used, e.join);
    if (got < 4 || strlen(e.digest) != 64) continue;
    if (got == 5 && strlen(e.join) != DF_PROTO_Z85_KEY) e.join[0] = 0;
    e.expiry = ex;
    if (*n == cap) {
      cap *= 2;
      tok_entry *nv = realloc(v, (size_t)cap * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    v[(*n)++] = e;
  }
  free(txt);
  return v;
}

static int tokens_write(const char *dir, const tok_entry *v, int n, char *err, size_t errlen) {
  char p[4200];
  snprintf(p, sizeof p, "%s/tokens", dir);
  size_t cap = (size_t)n * 150 + 1, len = 0;
  char *buf = malloc(cap);
  if (!buf) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int64_t now = (int64_t)time(NULL);
  for (int i = 0; i < n; i++) {
    /* drop expired entries; used single-use ones stay until they expire, so a reuse is
     * refused as such ("token already used") rather than as unknown */
    if (v[i].expiry && v[i].expiry < now) continue;
    len += (size_t)snprintf(buf + len, cap - len, "%s %lld %d %d%s%s\n", v[i].digest,
                            (long long)v[i].expiry, v[i].reusable, v[i].used,
                            v[i].join[0] ? " " : "", v[i].join);
  }
  int rc = df_proto_write_atomic(p, buf, len, 0600, err, errlen);
  free(buf);
  return rc;
}

int df_proto_token_create(const char *state_dir, const char *pub_z85, int64_t ttl_s,
                          bool reusable, char *out, size_t cap, int64_t *expiry, char *err,
                          size_t errlen) {
  uint8_t secret[DF_PROTO_SECRET_HEX / 2], dg[32];
  char shex[DF_PROTO_SECRET_HEX + 1], khex[65];
  if (cap < DF_PROTO_TOKEN_LEN + 1) {
    snprintf(err, errlen, "token buffer too small");
    return -1;
  }
  if (df_proto_z85_to_hex(pub_z85, khex) != 0) {
    snprintf(err, errlen, "coordinator public key is malformed");
    return -1;
  }
  if (df_proto_random(secret, sizeof secret, err, errlen) != 0) return -1;
  df_proto_hex(secret, sizeof secret, shex);
  df_proto_sha256(shex, DF_PROTO_SECRET_HEX, dg);
  df_proto_keypair jk;
  if (df_proto_token_join_keypair(shex, &jk) != 0) {
    snprintf(err, errlen, "cannot derive the token's join key (libzmq without CURVE?)");
    return -1;
  }
  int lk = lock_state(state_dir);
  if (lk < 0) {
    snprintf(err, errlen, "cannot lock %s/.lock: %s", state_dir, strerror(errno));
    return -1;
  }
  int n = 0;
  tok_entry *v = tokens_read(state_dir, &n);
  tok_entry *nv = realloc(v, (size_t)(n + 1) * sizeof *nv);
  int rc = -1;
  if (!nv) {
    free(v);
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  v = nv;
  df_proto_hex(dg, 32, v[n].digest);
  v[n].expiry = ttl_s > 0 ? (int64_t)time(NULL) + ttl_s : 0;
  v[n].reusable = reusable;
  v[n].used = 0;
  memcpy(v[n].join, jk.pub, sizeof v[n].join);
  int64_t exp = v[n].expiry;
  rc = tokens_write(state_dir, v, n + 1, err, errlen);
  free(v);
  if (rc == 0) {
    snprintf(out, cap, "dft1_%s_%s", khex, shex);
    if (expiry) *expiry = exp;
  }
done:
  unlock_state(lk);
  return rc;
}

int df_proto_token_parse(const char *token, char pub_z85[DF_PROTO_Z85_KEY + 1],
                         char secret[DF_PROTO_SECRET_HEX + 1], char *err, size_t errlen) {
  uint8_t raw[16];
  if (strlen(token) != DF_PROTO_TOKEN_LEN || strncmp(token, "dft1_", 5) || token[69] != '_' ||
      df_proto_hex_to_z85(token + 5, 64, pub_z85) != 0 ||
      unhex(token + 70, DF_PROTO_SECRET_HEX / 2, raw) != 0) {
    snprintf(err, errlen, "malformed join token (expected dft1_<64 hex>_<32 hex>, as printed "
             "by 'deltafin cluster token')");
    return -1;
  }
  memcpy(secret, token + 70, DF_PROTO_SECRET_HEX);
  secret[DF_PROTO_SECRET_HEX] = 0;
  return 0;
}

int df_proto_token_join_keypair(const char *secret_hex, df_proto_keypair *kp) {
  static const char tag[] = "deltafin join key v1:";
  uint8_t raw[DF_PROTO_SECRET_HEX / 2], sec[32];
  if (strlen(secret_hex) != DF_PROTO_SECRET_HEX || unhex(secret_hex, sizeof raw, raw) != 0) return -1;
  df_proto_sha256_ctx c;
  df_proto_sha256_init(&c);
  df_proto_sha256_update(&c, tag, sizeof tag - 1);
  df_proto_sha256_update(&c, secret_hex, DF_PROTO_SECRET_HEX);
  df_proto_sha256_final(&c, sec);
  int rc = zmq_z85_encode(kp->sec, sec, 32) && zmq_curve_public(kp->pub, kp->sec) == 0 ? 0 : -1;
  memset(sec, 0, sizeof sec);
  return rc;
}

int df_proto_token_redeem(const char *state_dir, const char *secret, const char *conn_pub,
                          char *err, size_t errlen) {
  uint8_t dg[32];
  char dhex[65];
  df_proto_sha256(secret, strlen(secret), dg);
  df_proto_hex(dg, 32, dhex);
  int lk = lock_state(state_dir);
  if (lk < 0) {
    snprintf(err, errlen, "cannot lock %s/.lock: %s", state_dir, strerror(errno));
    return -1;
  }
  int n = 0, hit = -1;
  tok_entry *v = tokens_read(state_dir, &n);
  /* compare against every entry, in constant time per entry, before deciding */
  for (int i = 0; i < n; i++)
    if (df_proto_ct_equal(v[i].digest, dhex, 64)) hit = i;
  int rc = -1;
  int64_t now = (int64_t)time(NULL);
  if (hit < 0) snprintf(err, errlen, "unknown token");
  else if (v[hit].expiry && v[hit].expiry < now) snprintf(err, errlen, "token expired");
  else if (v[hit].used && !v[hit].reusable) snprintf(err, errlen, "token already used");
  else if (conn_pub && strcmp(v[hit].join, conn_pub)) snprintf(err, errlen, "token of another key");
  else {
    v[hit].used = 1;
    rc = tokens_write(state_dir, v, n, err, errlen);
  }
  free(v);
  unlock_state(lk);
  return rc;
}

int df_proto_token_admit(const char *state_dir, const char *secret, const char *conn_pub,
                         const char *node_pub, const char *name, char *err, size_t errlen) {
  uint8_t raw[32];
  if (!secret || !secret[0] || !node_pub || strlen(node_pub) != DF_PROTO_Z85_KEY ||
      !zmq_z85_decode(raw, node_pub)) {
    snprintf(err, errlen, "a JOIN on a token's key must carry the token and the node's key");
    return -1;
  }
  if (df_proto_key_revoked(state_dir, node_pub)) {
    snprintf(err, errlen, "this node's key was revoked ('deltafin cluster revoke'); a machine "
             "that should come back joins with a new key (remove node.key from its state "
             "directory)");
    return -1;
  }
  if (df_proto_token_redeem(state_dir, secret, conn_pub, err, errlen) != 0) return -1;
  char nm[64];
  snprintf(nm, sizeof nm, "%s", name ? name : "");
  for (char *q = nm; *q; q++) /* peer text in the allow-list and logs: printable ASCII only */
    if ((unsigned char)*q <= 0x20 || (unsigned char)*q > 0x7e || *q == '"' || *q == '\\') *q = '_';
  return df_proto_allow_add(state_dir, node_pub, nm, err, errlen);
}

bool df_proto_token_join_key_open(const char *state_dir, const char *pub_z85, char *why,
                                  size_t whylen) {
  int n = 0;
  tok_entry *v = tokens_read(state_dir, &n);
  int64_t now = (int64_t)time(NULL);
  const char *r = "no open token has this key";
  bool open = false;
  for (int i = 0; i < n && !open; i++) {
    if (!v[i].join[0] || strcmp(v[i].join, pub_z85)) continue;
    if (v[i].expiry && v[i].expiry < now) r = "its token expired";
    else if (v[i].used && !v[i].reusable) r = "its token was already used";
    else open = true;
  }
  free(v);
  if (!open && why) snprintf(why, whylen, "%s", r);
  return open;
}

/* ---- allow-list -------------------------------------------------------------------- */

/* Whether STATE/file (lines "<key> <name> ...") lists pub_z85; its name into name (may be
 * NULL). */
static bool list_has(const char *state_dir, const char *file, const char *pub_z85, char *name,
                     size_t cap) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", state_dir, file);
  char *txt = slurp(p, NULL);
  if (!txt) return false;
  bool found = false;
  char *save = NULL;
  for (char *line = strtok_r(txt, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
    char k[64], nm[DF_PROTO_Z85_KEY + 64];
    nm[0] = 0;
    if (sscanf(line, "%63s %103s", k, nm) < 1) continue;
    if (strlen(k) == DF_PROTO_Z85_KEY && df_proto_ct_equal(k, pub_z85, DF_PROTO_Z85_KEY)) {
      found = true;
      if (name && cap) snprintf(name, cap, "%s", nm);
    }
  }
  free(txt);
  return found;
}

bool df_proto_allow_has(const char *state_dir, const char *pub_z85, char *name, size_t cap) {
  return list_has(state_dir, "nodes", pub_z85, name, cap);
}

bool df_proto_key_revoked(const char *state_dir, const char *pub_z85) {
  return list_has(state_dir, "revoked", pub_z85, NULL, 0);
}

int df_proto_allow_add(const char *state_dir, const char *pub_z85, const char *name, char *err,
                       size_t errlen) {
  char p[4200];
  snprintf(p, sizeof p, "%s/nodes", state_dir);
  int lk = lock_state(state_dir);
  if (lk < 0) {
    snprintf(err, errlen, "cannot lock %s/.lock: %s", state_dir, strerror(errno));
    return -1;
  }
  int rc = 0;
  if (!df_proto_allow_has(state_dir, pub_z85, NULL, 0)) {
    size_t len = 0;
    char *txt = slurp(p, &len);
    if (!txt && errno != ENOENT) { /* never rewrite a list that could not be read */
      snprintf(err, errlen, "cannot read %s: %s", p, errno == EPERM ? "not trusted (see above)"
                                                                    : strerror(errno));
      unlock_state(lk);
      return -1;
    }
    size_t lines = 0;
    for (size_t i = 0; txt && i < len; i++) lines += txt[i] == '\n';
    if (lines >= DF_PROTO_MAX_ALLOW) {
      snprintf(err, errlen, "the allow-list %s holds %d keys, its limit: remove departed nodes "
               "with 'deltafin cluster revoke'", p, DF_PROTO_MAX_ALLOW);
      free(txt);
      unlock_state(lk);
      return -1;
    }
    size_t cap = len + 200;
    char *buf = malloc(cap);
    if (!buf) {
      free(txt);
      snprintf(err, errlen, "out of memory");
      unlock_state(lk);
      return -1;
    }
    /* names are single tokens in the file */
    char nm[DF_PROTO_Z85_KEY + 64];
    snprintf(nm, sizeof nm, "%s", name && name[0] ? name : "-");
    for (char *s = nm; *s; s++)
      if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') *s = '_';
    int n = snprintf(buf, cap, "%s%s %s %lld\n", txt ? txt : "", pub_z85, nm,
                     (long long)time(NULL));
    rc = df_proto_write_atomic(p, buf, (size_t)n, 0600, err, errlen);
    free(buf);
    free(txt);
  }
  unlock_state(lk);
  return rc;
}

int df_proto_allow_revoke(const char *state_dir, const char *who, char *removed, size_t cap,
                          char *err, size_t errlen) {
  char p[4200];
  snprintf(p, sizeof p, "%s/nodes", state_dir);
  if (removed && cap) removed[0] = 0;
  size_t wl = strlen(who);
  bool hex = wl >= 8 && wl <= 16 && strspn(who, "0123456789abcdef") == wl;
  int lk = lock_state(state_dir);
  if (lk < 0) {
    snprintf(err, errlen, "cannot lock %s/.lock: %s", state_dir, strerror(errno));
    return -1;
  }
  size_t len = 0;
  char *txt = slurp(p, &len);
  if (!txt) {
    int e = errno;
    unlock_state(lk);
    if (e == ENOENT) return 0;
    snprintf(err, errlen, "cannot read %s: %s", p, e == EPERM ? "not trusted (see above)" : strerror(e));
    return -1;
  }
  char *out = malloc(len + 1);
  if (!out) {
    free(txt);
    unlock_state(lk);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  size_t olen = 0, rlen = 0, rlen_keys = 0;
  char *revoked_lines = malloc(len + 1); /* the removed lines, for STATE/revoked */
  if (!revoked_lines) {
    free(out);
    free(txt);
    unlock_state(lk);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int n = 0;
  char *save = NULL;
  for (char *line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char k[64] = "", nm[DF_PROTO_Z85_KEY + 64] = "", fp[17] = "";
    if (sscanf(line, "%63s %103s", k, nm) >= 1 && strlen(k) == DF_PROTO_Z85_KEY) {
      df_proto_key_fingerprint(k, fp);
      if (!strcmp(nm, who) || (hex && !strncmp(fp, who, wl))) {
        n++;
        size_t ll = strlen(line);
        memcpy(revoked_lines + rlen_keys, line, ll);
        rlen_keys += ll;
        revoked_lines[rlen_keys++] = '\n';
        if (removed && cap > rlen)
          rlen += (size_t)snprintf(removed + rlen, cap - rlen, "%s %s\n", fp, nm);
        if (removed && rlen >= cap) rlen = cap - 1;
        continue;
      }
    }
    size_t l = strlen(line);
    memcpy(out + olen, line, l);
    olen += l;
    out[olen++] = '\n';
  }
  int rc = n;
  if (n > 0 && df_proto_write_atomic(p, out, olen, 0600, err, errlen) != 0) rc = -1;
  if (rc > 0) { /* recorded, so that no token admits these keys again */
    char rp[4200];
    snprintf(rp, sizeof rp, "%s/revoked", state_dir);
    size_t have = 0;
    char *old = slurp(rp, &have);
    if (!old && errno != ENOENT) {
      snprintf(err, errlen, "cannot read %s: %s", rp, strerror(errno));
      rc = -1;
    } else {
      size_t cap2 = have + rlen_keys + 16;
      char *nb = malloc(cap2);
      if (!nb) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
      } else {
        size_t nl = have;
        if (have) memcpy(nb, old, have);
        memcpy(nb + nl, revoked_lines, rlen_keys);
        nl += rlen_keys;
        if (df_proto_write_atomic(rp, nb, nl, 0600, err, errlen) != 0) rc = -1;
        free(nb);
      }
    }
    free(old);
  }
  free(revoked_lines);
  free(out);
  free(txt);
  unlock_state(lk);
  return rc;
}

int df_proto_state_claim(const char *state_dir, const char *name, const char *what, char *err,
                         size_t errlen) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", state_dir, name);
  int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s", p, strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char b[32] = "";
    ssize_t r = pread(fd, b, sizeof b - 1, 0);
    b[r > 0 ? r : 0] = 0;
    long pid = strtol(b, NULL, 10);
    close(fd);
    if (e == EWOULDBLOCK)
      snprintf(err, errlen, "another %s (pid %ld) is using the state directory %s; give each "
               "its own --state-dir", what, pid, state_dir);
    else
      snprintf(err, errlen, "cannot lock %s: %s", p, strerror(e));
    return -1;
  }
  char b[32];
  int n = snprintf(b, sizeof b, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, b, (size_t)n, 0) != n) { /* the pid is informative */
  }
  return fd;
}
