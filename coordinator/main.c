/* coordinator/main.c — the deltafin command-line entry point. */
#include <stdio.h>
int main(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "deltafin: no commands yet\n"); return 2; }
