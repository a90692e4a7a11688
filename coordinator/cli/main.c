/* coordinator/cli/main.c — the deltafin command-line entry point: dispatches subcommands. */
#include <stdio.h>
#include <string.h>

#include "coordinator/cli/cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: deltafin <command> [options]\n"
          "\n"
          "commands:\n"
          "  run       generate from a prompt (deltafin run --help)\n"
          "  inspect   config summary, tensor inventory and memory plan of a model folder\n"
          "  plan      placement and predicted time per token on given machines (deltafin plan --help)\n"
          "  tokenize  print the token ids and pieces of a text (deltafin tokenize --help)\n"
          "  serve     OpenAI-compatible HTTP API (deltafin serve --help)\n"
          "  pull      download a model from the Hugging Face hub (deltafin pull --help)\n"
          "  setup     pull a model (default Kimi K3) --full or --stream, and say how to run it\n"
          "  verify    check a model folder against its manifest, offline\n"
          "  cluster   cluster keys, join tokens and status (deltafin cluster --help)\n"
          "  doctor    check this installation offline: OK / WARN / FAIL lines (deltafin doctor --help)\n"
          "  upgrade   update a source install's checkout and rebuild it (deltafin upgrade --help)\n"
          "\n"
          "deltafin --version\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "run")) return df_cmd_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "inspect")) return df_cmd_inspect(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return df_cmd_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize")) return df_cmd_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "serve")) return df_cmd_serve(argc - 1, argv + 1);
  if (!strcmp(cmd, "pull")) return df_cmd_pull(argc - 1, argv + 1);
  if (!strcmp(cmd, "setup")) return df_cmd_setup(argc - 1, argv + 1);
  if (!strcmp(cmd, "verify")) return df_cmd_verify(argc - 1, argv + 1);
  if (!strcmp(cmd, "cluster")) return df_cmd_cluster(argc - 1, argv + 1);
  if (!strcmp(cmd, "doctor")) return df_cmd_doctor(argc - 1, argv + 1);
  if (!strcmp(cmd, "upgrade")) return df_cmd_upgrade(argc - 1, argv + 1);
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("deltafin 0.1.0\n");
    return 0;
  }
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "deltafin: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
