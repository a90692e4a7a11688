/* coordinator/cmd_tokenize.h — `deltafin tokenize`: show how a model's tokenizer splits text.
 *
 * Owns: the tokenize subcommand only; tokenization itself is engine/text/tokenizer.h.
 */
#ifndef DF_COORD_CMD_TOKENIZE_H
#define DF_COORD_CMD_TOKENIZE_H

/* deltafin tokenize --model DIR [--ids-only] [--no-special] [--add-special] TEXT
 * argv[0] is the subcommand name ("tokenize"); options follow. TEXT may also be given as
 * "-" to read standard input. Prints one line per token, "ID<TAB>PIECE" (PIECE is the text the
 * token decodes to as a JSON string, with bytes of an incomplete character as \xNN), or, with
 * --ids-only, the ids on one line separated by spaces. --no-special encodes TEXT as plain text
 * (added tokens such as "<|im_end|>" are not matched); --add-special applies the tokenizer's
 * post-processor (BOS/EOS). Returns the exit status: 0 ok, 1 runtime error (message on stderr
 * naming the file), 2 usage error. */
int df_cmd_tokenize(int argc, char **argv);

#endif
