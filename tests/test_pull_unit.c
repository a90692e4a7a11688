/* tests/test_pull_unit.c — unit tests of the pieces under deltafin pull and stream mode: the
 * expert cache (budget, LRU, persistence, trust on first use, corruption, lock), the
 * manifest parser (round trip and a malformed-input table), name validation and hashing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/hub/pull.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"
#include "coordinator/hub/stream_cache.h"

static char g_tmp[512];

static void rm_rf(const char *p) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  assert_int_equal(system(cmd), 0);
}

static uint64_t blob_bytes(const char *dir) {
  char p[800];
  snprintf(p, sizeof p, "%s/blobs", dir);
  DIR *d = opendir(p);
  uint64_t total = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char f[1200];
    struct stat st;
    snprintf(f, sizeof f, "%s/%s", p, de->d_name);
    if (stat(f, &st) == 0) total += (uint64_t)st.st_size;
  }
  if (d) closedir(d);
  return total;
}

static void fill(uint8_t *b, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 31 + (size_t)seed * 7);
}

static void put(df_stream_cache *c, const char *key, int seed, size_t n) {
  uint8_t buf[4096];
  const void *data;
  char err[512];
  fill(buf, n, seed);
  int rc = df_stream_cache_put(c, key, buf, n, &data, err, sizeof err);
  if (rc) fprintf(stderr, "put %s: %s\n", key, err);
  assert_int_equal(rc, 0);
  assert_memory_equal(data, buf, n);
}

static int get(df_stream_cache *c, const char *key) {
  const void *data;
  uint64_t len;
  char err[512];
  return df_stream_cache_get(c, key, &data, &len, err, sizeof err);
}

static void test_cache_budget_lru(void **state) {
  (void)state;
  char dir[700];
  snprintf(dir, sizeof dir, "%s/cache-lru", g_tmp);
  rm_rf(dir);
  df_stream_cache *c = NULL;
  char err[512];
  assert_int_equal(df_stream_cache_open(dir, 3000, &c, err, sizeof err), 0);
  put(c, "k1", 1, 1000);
  put(c, "k2", 2, 1000);
  put(c, "k3", 3, 1000);
  assert_int_equal(df_stream_cache_bytes(c), 3000);
  assert_int_equal(get(c, "k1"), 1); /* k2 is now the least recently used */
  put(c, "k4", 4, 1000);
  assert_true(blob_bytes(dir) <= 3000);
  assert_int_equal(get(c, "k2"), 0);
  assert_int_equal(get(c, "k1"), 1);
  assert_int_equal(get(c, "k3"), 1);
  assert_int_equal(get(c, "k4"), 1);
  /* a bigger blob evicts as many as needed */
  put(c, "big", 5, 2500);
  assert_true(df_stream_cache_bytes(c) <= 3000 && blob_bytes(dir) <= 3000);
  assert_int_equal(get(c, "big"), 1);
  /* larger than the whole budget: refused */
  uint8_t buf[4096] = {0};
  const void *data;
  assert_int_equal(df_stream_cache_put(c, "huge", buf, 3001, &data, err, sizeof err), -1);
  assert_non_null(strstr(err, "budget"));
  /* a second process cannot open it */
  df_stream_cache *c2 = NULL;
  assert_int_equal(df_stream_cache_open(dir, 3000, &c2, err, sizeof err), -1);
  assert_non_null(strstr(err, "in use"));
  df_stream_cache_stats st = df_stream_cache_get_stats(c);
  assert_true(st.evictions >= 3);
  df_stream_cache_close(&c);
  assert_null(c);
}

static void test_cache_persist_and_shrink(void **state) {
  (void)state;
  char dir[700], p[900];
  snprintf(dir, sizeof dir, "%s/cache-persist", g_tmp);
  rm_rf(dir);
  df_stream_cache *c = NULL;
  char err[512];
  assert_int_equal(df_stream_cache_open(dir, 4000, &c, err, sizeof err), 0);
  put(c, "a", 1, 1000);
  put(c, "b", 2, 1000);
  put(c, "c", 3, 1000);
  assert_int_equal(get(c, "a"), 1); /* order now b, c, a */
  df_stream_cache_close(&c);
  /* litter: an orphan blob and a stale temp file are swept at open */
  snprintf(p, sizeof p, "%s/blobs/%064d", dir, 0);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs("orphan", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/tmp/x.123", dir);
  f = fopen(p, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(df_stream_cache_open(dir, 4000, &c, err, sizeof err), 0);
  assert_int_equal(blob_bytes(dir), 3000);
  assert_int_equal(access(p, F_OK), -1);
  assert_int_equal(get(c, "b"), 1); /* order c, a, b */
  df_stream_cache_close(&c);
  /* reopened with a smaller budget: the least recently used go */
  assert_int_equal(df_stream_cache_open(dir, 2000, &c, err, sizeof err), 0);
  assert_int_equal(blob_bytes(dir), 2000);
  assert_int_equal(get(c, "c"), 0);
  assert_int_equal(get(c, "a"), 1);
  assert_int_equal(get(c, "b"), 1);
  df_stream_cache_close(&c);
}

static void test_cache_trust_and_corruption(void **state) {
  (void)state;
  char dir[700], err[512];
  snprintf(dir, sizeof dir, "%s/cache-tofu", g_tmp);
  rm_rf(dir);
  df_stream_cache *c = NULL;
  assert_int_equal(df_stream_cache_open(dir, 2000, &c, err, sizeof err), 0);
  put(c, "x", 1, 1000);
  put(c, "y", 2, 1000);
  put(c, "z", 3, 1000); /* evicts x */
  assert_int_equal(get(c, "x"), 0);
  /* re-fetched bytes must be the ones first stored under the key */
  uint8_t buf[1000];
  const void *data;
  fill(buf, sizeof buf, 9);
  assert_int_equal(df_stream_cache_put(c, "x", buf, sizeof buf, &data, err, sizeof err), -1);
  assert_non_null(strstr(err, "changed"));
  put(c, "x", 1, 1000); /* the same bytes are fine */
  df_stream_cache_close(&c);
  /* flip a byte of a blob on disk: dropped, reported as a miss */
  char p[1200];
  char hex[DF_PULL_SHA256_HEX];
  fill(buf, 1000, 1);
  df_pull_sha256_buf(buf, 1000, hex);
  snprintf(p, sizeof p, "%s/blobs/%s", dir, hex);
  chmod(p, 0644);
  FILE *f = fopen(p, "r+b");
  assert_non_null(f);
  fseek(f, 10, SEEK_SET);
  fputc(0xEE, f);
  fclose(f);
  assert_int_equal(df_stream_cache_open(dir, 2000, &c, err, sizeof err), 0);
  assert_int_equal(get(c, "x"), 0);
  assert_int_equal(df_stream_cache_get_stats(c).corrupt_dropped, 1);
  assert_int_equal(access(p, F_OK), -1);
  put(c, "x", 1, 1000);
  assert_int_equal(get(c, "x"), 1);
  df_stream_cache_close(&c);
}

static void test_cache_shared_content(void **state) {
  (void)state;
  char dir[700], err[512];
  snprintf(dir, sizeof dir, "%s/cache-shared", g_tmp);
  rm_rf(dir);
  df_stream_cache *c = NULL;
  assert_int_equal(df_stream_cache_open(dir, 2000, &c, err, sizeof err), 0);
  put(c, "p", 1, 1000);
  put(c, "q", 1, 1000); /* same bytes: one blob */
  assert_int_equal(blob_bytes(dir), 1000);
  assert_int_equal(df_stream_cache_bytes(c), 1000);
  put(c, "r", 2, 1000);
  assert_int_equal(get(c, "q"), 1); /* LRU order: p, r, q */
  put(c, "s", 3, 1000); /* evicting p frees nothing (q holds the blob), so r goes too */
  assert_int_equal(get(c, "p"), 0);
  assert_int_equal(get(c, "r"), 0);
  assert_int_equal(get(c, "q"), 1);
  assert_int_equal(get(c, "s"), 1);
  assert_true(blob_bytes(dir) <= 2000);
  df_stream_cache_close(&c);
}

static const char *GOOD_MANIFEST =
    "{\"format\": \"deltafin-manifest\", \"version\": 1, \"endpoint\": \"https://huggingface.co\","
    " \"repo\": \"acme/tiny\", \"revision\": \"main\", \"commit\": \"0123456789abcdef0123456789abcdef01234567\","
    " \"created\": \"2025-01-01T00:00:00Z\", \"mode\": \"stream\", \"complete\": false, \"cache_budget\": 1000,"
    " \"files\": [{\"path\": \"config.json\", \"size\": 3, \"sha256\": "
    "\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"},"
    " {\"path\": \"sub/model.safetensors\", \"size\": 100, \"sparse\": true, \"omitted_bytes\": 40,"
    " \"unused_bytes\": 10,"
    " \"lfs_sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\","
    " \"ranges\": [[0, 20, \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"],"
    " [70, 30, \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"]]}],"
    " \"pending\": [\"tokenizer.json\"]}";

static void test_manifest_roundtrip(void **state) {
  (void)state;
  df_pull_manifest m;
  char err[512], dir[700];
  assert_int_equal(df_pull_manifest_parse(GOOD_MANIFEST, strlen(GOOD_MANIFEST), "m", &m, err,
                                          sizeof err), 0);
  assert_true(m.stream);
  assert_false(m.complete);
  assert_int_equal(m.n_files, 2);
  assert_int_equal(m.n_pending, 1);
  df_pull_mfile *f = df_pull_manifest_find(&m, "sub/model.safetensors");
  assert_non_null(f);
  assert_true(f->sparse);
  assert_int_equal(f->n_ranges, 2);
  assert_int_equal(f->ranges[1].off, 70);
  snprintf(dir, sizeof dir, "%s/manifest", g_tmp);
  rm_rf(dir);
  assert_int_equal(df_fs_mkdirs(dir, err, sizeof err), 0);
  assert_int_equal(df_pull_manifest_write(dir, &m, err, sizeof err), 0);
  df_pull_manifest m2;
  assert_int_equal(df_pull_manifest_read(dir, &m2, err, sizeof err), 0);
  assert_string_equal(m2.commit, m.commit);
  assert_int_equal(m2.n_files, 2);
  assert_int_equal(df_pull_manifest_find(&m2, "sub/model.safetensors")->omitted, 40);
  assert_int_equal(df_pull_manifest_find(&m2, "sub/model.safetensors")->unused, 10);
  assert_int_equal(m2.cache_budget, 1000);
  df_pull_manifest_free(&m2);
  df_pull_manifest_free(&m);
  snprintf(dir, sizeof dir, "%s/manifest-none", g_tmp);
  rm_rf(dir);
  assert_int_equal(df_fs_mkdirs(dir, err, sizeof err), 0);
  assert_int_equal(df_pull_manifest_read(dir, &m, err, sizeof err), 1);
  df_pull_manifest_free(&m);
}

/* Malformed manifests: (substitution of GOOD_MANIFEST text, expected message part). */
static void test_manifest_malformed(void **state) {
  (void)state;
  static const struct {
    const char *from, *to, *want;
  } cases[] = {
      {"\"version\": 1", "\"version\": 2", "version"},
      {"deltafin-manifest", "other", "format"},
      {"\"config.json\"", "\"../config.json\"", "files[0].path"},
      {"\"unused_bytes\": 10", "\"unused_bytes\": \"x\"", "files[1].unused_bytes"},
      {"\"config.json\"", "\"/etc/passwd\"", "files[0].path"},
      {"\"config.json\"", "\".deltafin/x\"", "files[0].path"},
      {"\"size\": 3", "\"size\": -3", "files[0].size"},
      {"\"size\": 3, \"sha256\": \"ba78", "\"size\": 3, \"sha256\": \"BA78", "files[0].sha256"},
      {"[70, 30", "[10, 30", "files[1].ranges[1]"},
      {"[70, 30", "[80, 30", "files[1].ranges[1]"},
      {"\"mode\": \"stream\"", "\"mode\": \"fast\"", "mode"},
      {"\"acme/tiny\"", "\"acme/../tiny\"", "repo"},
      {"\"complete\": false", "\"complete\": 0", "complete"},
      {"\"sub/model.safetensors\"", "\"config.json\"", "duplicate"},
      {"\"pending\": [\"tokenizer.json\"]", "\"pending\": [\"a//b\"]", "pending[0]"},
      {"{\"format\"", "[{\"format\"", "line"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *at = strstr(GOOD_MANIFEST, cases[i].from);
    assert_non_null(at);
    char text[4096];
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - GOOD_MANIFEST), GOOD_MANIFEST, cases[i].to,
             at + strlen(cases[i].from));
    df_pull_manifest m;
    char err[512] = "";
    int rc = df_pull_manifest_parse(text, strlen(text), "m", &m, err, sizeof err);
    if (rc != -1 || !strstr(err, cases[i].want))
      fprintf(stderr, "case %zu: rc %d err '%s', want '%s'\n", i, rc, err, cases[i].want);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, cases[i].want));
    df_pull_manifest_free(&m);
  }
}

static void test_names(void **state) {
  (void)state;
  static const struct {
    const char *s;
    bool ok;
  } repos[] = {{"Qwen/Qwen3-30B-A3B", true}, {"gpt2", true}, {"a/b.c_d-e", true},
               {"", false}, {"a/b/c", false}, {"../x", false}, {"a/..b", false},
               {"a b/c", false}, {"-a/b", false}, {"a/b.", false}, {"a/", false}, {"/b", false}};
  for (size_t i = 0; i < sizeof repos / sizeof repos[0]; i++)
    assert_int_equal(df_pull_repo_id_ok(repos[i].s), repos[i].ok);
  static const struct {
    const char *s;
    bool ok;
  } paths[] = {{"config.json", true}, {"original/consolidated.safetensors", true},
               {".gitattributes", true}, {"", false}, {"/abs", false}, {"a/../b", false},
               {"..", false}, {"./a", false}, {"a//b", false}, {"a/", false}, {"a\\b", false},
               {"a\nb", false}, {".deltafin/partial/x", false}, {"x/.deltafin", true},
               {".deltafin-manifest.json", false}, {".deltafin-manifest.json.tmp.1", false},
               {".deltafin-manifest.jsonx", true}, {"x/.deltafin-manifest.json", true}};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    if (df_pull_path_ok(paths[i].s) != paths[i].ok) fprintf(stderr, "path '%s'\n", paths[i].s);
    assert_int_equal(df_pull_path_ok(paths[i].s), paths[i].ok);
  }
  assert_true(df_pull_revision_ok("main"));
  assert_true(df_pull_revision_ok("refs/pr/1"));
  assert_false(df_pull_revision_ok("a b"));
  assert_false(df_pull_revision_ok("../x"));
  char out[128];
  assert_int_equal(df_pull_urlenc("refs/pr/1", false, out, sizeof out), 0);
  assert_string_equal(out, "refs%2Fpr%2F1");
  assert_int_equal(df_pull_urlenc("a b/c+d.json", true, out, sizeof out), 0);
  assert_string_equal(out, "a%20b/c%2Bd.json");
  assert_int_equal(df_pull_urlenc("abcdef", false, out, 4), -1);
  char url[512];
  assert_int_equal(df_pull_resolve_url("http://h", "o/n", "refs/pr/1", "d/f x.bin", url,
                                       sizeof url), 0);
  assert_string_equal(url, "http://h/o/n/resolve/refs%2Fpr%2F1/d/f%20x.bin");
  uint64_t b;
  assert_int_equal(df_pull_parse_bytes("20G", &b), 0);
  assert_true(b == (uint64_t)20 << 30);
  assert_int_equal(df_pull_parse_bytes("1.5KiB", &b), 0);
  assert_true(b == 1536);
  assert_int_equal(df_pull_parse_bytes("100", &b), 0);
  assert_true(b == 100);
  assert_int_equal(df_pull_parse_bytes("-1", &b), -1);
  assert_int_equal(df_pull_parse_bytes("5X", &b), -1);
  assert_true(df_pull_is_expert_tensor("model.layers.3.mlp.experts.17.gate_proj.weight"));
  assert_true(df_pull_is_expert_tensor("model.layers.3.mlp.experts.0.down_proj.weight_scale_inv"));
  assert_false(df_pull_is_expert_tensor("model.layers.3.mlp.gate.weight"));
  assert_false(df_pull_is_expert_tensor("model.layers.3.mlp.shared_experts.gate_proj.weight"));
  assert_false(df_pull_is_expert_tensor("model.layers.3.mlp.experts.x.gate_proj.weight"));
  /* Kimi K3: MXFP4 experts under a wrapper's prefix, no `.weight` tensor */
  assert_true(df_pull_is_expert_tensor(
      "language_model.model.layers.1.block_sparse_moe.experts.895.w1.weight_packed"));
  assert_true(df_pull_is_expert_tensor(
      "language_model.model.layers.92.block_sparse_moe.experts.0.w2.weight_scale"));
  assert_false(df_pull_is_expert_tensor(
      "language_model.model.layers.1.block_sparse_moe.shared_experts.gate_proj.weight"));
  assert_false(df_pull_is_expert_tensor(
      "language_model.model.layers.1.block_sparse_moe.routed_expert_up_proj.weight"));
  assert_false(df_pull_is_expert_tensor("language_model.model.layers.1.block_sparse_moe.gate.weight"));
}

static void test_hashes(void **state) {
  (void)state;
  char hex[DF_PULL_SHA256_HEX], g[DF_PULL_SHA1_HEX];
  df_pull_sha256_buf("abc", 3, hex);
  assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  df_pull_gitsha gs;
  df_pull_gitsha_init(&gs, 6);
  df_pull_gitsha_update(&gs, "hel", 3);
  df_pull_gitsha_update(&gs, "lo\n", 3);
  df_pull_gitsha_final(&gs, g);
  assert_string_equal(g, "ce013625030ba8dba906f756967f9e9ca394464a"); /* git hash-object */
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s/pull-unit", DF_BINARY_DIR);
  mkdir(g_tmp, 0755);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cache_budget_lru),
      cmocka_unit_test(test_cache_persist_and_shrink),
      cmocka_unit_test(test_cache_trust_and_corruption),
      cmocka_unit_test(test_cache_shared_content),
      cmocka_unit_test(test_manifest_roundtrip),
      cmocka_unit_test(test_manifest_malformed),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_hashes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
