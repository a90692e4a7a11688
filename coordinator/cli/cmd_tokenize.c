/* coordinator/cli/cmd_tokenize.c — `deltafin tokenize [--model DIR] [--ids-only] [--no-special]
 * TEXT`.
 *
 * Owns: option parsing and printing for the tokenize subcommand; without --model it uses the
 * bundled demo model (df_cli_default_model), as run and serve do. Does not own: tokenization
 * (engine/text/tokenizer.c).
 */
#include "coordinator/cli/cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/text/tokenizer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: deltafin tokenize [--model DIR] [--ids-only] [--no-special] [--add-special] TEXT\n"
          "  --model DIR    folder with tokenizer.json (or tiktoken.model) and\n"
          "                 tokenizer_config.json; default: the bundled demo model, as for run\n"
          "                 and serve (an error naming it when it is missing)\n"
          "  TEXT '-' reads standard input. --no-special: added tokens such as <|im_end|> in\n"
          "  TEXT are plain text. --add-special: add the tokenizer's BOS/EOS.\n");
}

/* Print bytes as the inside of a JSON string; bytes that are not part of a complete UTF-8
 * character are shown as \xNN. */
static void print_piece(const uint8_t *p, size_t n) {
  putchar('"');
  size_t i = 0;
  while (i < n) {
    uint8_t c = p[i];
    if (c == '"' || c == '\\') {
      printf("\\%c", c);
      i++;
    } else if (c == '\n') {
      fputs("\\n", stdout);
      i++;
    } else if (c == '\t') {
      fputs("\\t", stdout);
      i++;
    } else if (c == '\r') {
      fputs("\\r", stdout);
      i++;
    } else if (c < 0x20 || c == 0x7F) {
      printf("\\u%04x", c);
      i++;
    } else if (c < 0x80) {
      putchar(c);
      i++;
    } else {
      size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      char *ok = (k > 1 && i + k <= n) ? df_tok_utf8_sanitize((const char *)p + i, k, NULL) : NULL;
      if (ok && memcmp(ok, p + i, k) == 0) {
        fwrite(p + i, 1, k, stdout);
        i += k;
      } else {
        printf("\\x%02x", c);
        i++;
      }
      free(ok);
    }
  }
  putchar('"');
}

static char *read_stdin(size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  if (!b) return NULL;
  for (;;) {
    if (n == cap) {
      char *q = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
      if (!q) {
        free(b);
        return NULL;
      }
      b = q;
      cap *= 2;
    }
    size_t r = fread(b + n, 1, cap - n, stdin);
    if (r == 0) break;
    n += r;
  }
  *len = n;
  return b;
}

int df_cmd_tokenize(int argc, char **argv) {
  const char *model = NULL, *text = NULL;
  int ids_only = 0;
  unsigned flags = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--model") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "deltafin tokenize: --model needs a folder\n");
        return 2;
      }
      model = argv[++i];
    } else if (strncmp(a, "--model=", 8) == 0) {
      model = a + 8;
    } else if (strcmp(a, "--ids-only") == 0) {
      ids_only = 1;
    } else if (strcmp(a, "--no-special") == 0) {
      flags |= DF_TOK_PLAIN;
    } else if (strcmp(a, "--add-special") == 0) {
      flags |= DF_TOK_ADD_SPECIAL;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--") == 0 && i + 1 < argc && !text) {
      text = argv[++i];
    } else if (a[0] == '-' && a[1] != 0) {
      fprintf(stderr, "deltafin tokenize: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    } else if (!text) {
      text = a;
    } else {
      fprintf(stderr, "deltafin tokenize: give TEXT once (quote it), got also '%s'\n", a);
      return 2;
    }
  }
  if (!text) {
    fprintf(stderr, "deltafin tokenize: give the TEXT to tokenize ('-' reads standard input)\n");
    usage(stderr);
    return 2;
  }
  if (!model) {
    model = df_cli_default_model();
    char tj[4300];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", model);
    if (access(tj, R_OK) != 0) {
      fprintf(stderr, "deltafin tokenize: no --model given and the bundled demo model's "
              "tokenizer %s is missing; pass --model DIR\n", tj);
      return 2;
    }
  }
  char err[1024];
  df_tok *tok = NULL;
  char *in = NULL;
  int32_t *ids = NULL;
  size_t n = 0, len = 0;
  int rc = 1;
  if (df_tok_load(model, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    goto done;
  }
  if (strcmp(text, "-") == 0) {
    in = read_stdin(&len);
    if (!in) {
      fprintf(stderr, "deltafin tokenize: cannot read standard input\n");
      goto done;
    }
    text = in;
  } else {
    len = strlen(text);
  }
  /* the tokenizer works on text: bytes that are not UTF-8 would be replaced by U+FFFD and
   * lost, so they are refused, naming where */
  size_t bad = df_tok_utf8_invalid_at(text, len);
  if (bad < len) {
    fprintf(stderr, "deltafin tokenize: TEXT is not valid UTF-8: byte %zu (0x%02X) does not "
            "start a well-formed character; give UTF-8 text\n", bad, (unsigned char)text[bad]);
    rc = 2;
    goto done;
  }
  if (df_tok_encode(tok, text, len, flags, &ids, &n, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    if (ids_only) {
      printf(i ? " %d" : "%d", (int)ids[i]);
      continue;
    }
    size_t bl = 0;
    const uint8_t *b = df_tok_id_to_bytes(tok, ids[i], &bl);
    printf("%d\t", (int)ids[i]);
    print_piece(b, bl);
    putchar('\n');
  }
  if (ids_only) putchar('\n');
  rc = 0;
done:
  free(ids);
  free(in);
  df_tok_destroy(&tok);
  return rc;
}
