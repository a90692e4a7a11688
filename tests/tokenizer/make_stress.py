#!/usr/bin/env python3
"""Writes tests/tokenizer/stress.json: the tokenizer stress set (>= 200 strings).

Each entry is {"name": ..., "text": "..."} or, for byte strings that are not valid UTF-8,
{"name": ..., "hex": "..."}. Regenerate with: /usr/bin/python3 tests/tokenizer/make_stress.py
"""
import json, os, unicodedata

cases = []
def add(name, text):
    cases.append({"name": name, "text": text})
def addhex(name, b):
    cases.append({"name": name, "hex": b.hex()})

# English and contractions
for i, s in enumerate([
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "don't", "I'M HERE", "she'LL go",
    "they've we're you'd I'm", "it's John's and Mary's", "'s't're've'm'll'd", "x'\u017fx", "'\u017fs IT'\u017f", "''quoted''",
    "O'Neill's rock'n'roll", "it'\u017f", "ABC'S", "e.g. i.e. etc.", "Mr. Smith vs. Dr. Jones",
    "hello world ", " leading space", "  two leading", "trailing  ", "a", " ", "",
    "CamelCaseWordsAndHTTPServer", "snake_case_identifier_name", "kebab-case-name",
    "UPPER lower MiXeD", "x" * 1000, "abc" * 300, "supercalifragilisticexpialidocious",
    "https://example.com/path?query=1&b=2#frag", "user@example.org", "C:\\Windows\\System32",
    "~/.bashrc && echo $HOME", "!!!???...,,,;;;", "(parenthetical) [brackets] {braces} <angle>",
    "\"double\" 'single' `back`", "#hashtag @mention $dollar %percent ^caret &amp *star",
]):
    add(f"english_{i}", s)

# CJK and other scripts
for i, s in enumerate([
    "你好，世界！", "我爱北京天安门。", "日本語のテキストです。", "ひらがな カタカナ 漢字",
    "한국어 텍스트입니다.", "中文English混合text测试", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
    "「引用」『二重』【括弧】", "繁體中文與简体中文", "𠀀𠀁𠀂 (CJK Ext B)", "Ελληνικά κείμενο",
    "Русский текст, ёжик.", "עברית שָׁלוֹם", "العربية مَرْحَبًا", "हिन्दी पाठ", "ไทยภาษา",
    "ქართული", "Հայերեն", "ትግርኛ", "Tiếng Việt có dấu", "İstanbul ıı İİ", "Straße GROSS ß ẞ",
    "ǅungla ǈ ǋ", "Æsir Œuvre øre", "Ꭰ Cherokee", "ᠮᠣᠩᠭᠣᠯ Mongolian", "日本語\n中文\n한국어",
    "カタカナー・ヴ", "ｶﾀｶﾅ halfwidth", "〆〇〻", "ㄅㄆㄇ bopomofo", "中文123数字", "日本2024年",
]):
    add(f"script_{i}", s)

# Emoji: ZWJ, skin tones, flags, keycaps, variation selectors
for i, s in enumerate([
    "👍", "👍🏽", "👍🏿👍🏻", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "🇯🇵🇺🇸🇩🇪", "1️⃣ #️⃣ *️⃣",
    "❤️ ❤ ♥️", "🧑🏾‍🤝‍🧑🏻", "😀😃😄😁😆😅😂🤣", "hello 👋 world 🌍!", "emoji🙂inside🙂words",
    "👨‍⚕️👩‍⚖️", "🤷🏼‍♀️", "🫠", "☺︎ text style ☺️ emoji style", "🏻 lone modifier", "a\u200db",
    "\u200d\u200d", "👁️‍🗨️", "🇦", "🐈‍⬛", "😀" * 50,
]):
    add(f"emoji_{i}", s)

# Combining marks
for i, s in enumerate([
    "e\u0301", "a\u0308\u0301", "Z\u0351\u0352\u0353a\u0354\u0355l\u0356g\u0357o\u0358",
    "n\u0303o", "\u0301 leading combining", "o\u0302\u0323", "q\u0307\u0323", "\u0915\u094d\u0937",
    "ב\u05bc\u05b8", "ا\u064e\u0644\u0651", "x" + "\u0300" * 30, "ก\u0e34\u0e48", "\u1100\u1161\u11a8",
    "A\u030a", "\u212b", "\u2126", "\u00c5", "e\u0301\u0301", "cafe\u0301 naïve",
]):
    add(f"combining_{i}", s)

# NFC / NFD pairs: both forms of the same text
for i, s in enumerate([
    "café", "Ångström", "naïve résumé", "Übermäßig", "한국어", "ệ", "ﬁ ligature", "Å Ω K",
    "français élève", "Ǻ ǻ", "ḱṷṓn", "Ελληνικά άέή", "žluťoučký kůň", "ő ű Ő Ű", "ç ş ğ",
]):
    nfc, nfd = unicodedata.normalize("NFC", s), unicodedata.normalize("NFD", s)
    add(f"nfc_{i}", nfc)
    add(f"nfd_{i}", nfd)

# Digits
for i, s in enumerate([
    "1234567890" * 10, "3.14159265358979", "1,000,000.00", "0x1F 0b1010 0o17", "2024-01-31T12:00:00Z",
    "٠١٢٣٤٥٦٧٨٩", "１２３４５", "x² + y³ = z⁴", "½ ¼ ¾", "Ⅻ ⅻ Ⅳ", "①②③", "१२३", "a1b2c3d4",
    "v1.2.3-rc.4", "+1 (555) 123-4567", "9" * 257, "1e-10 6.02e23", "$12.99 €5,50 ¥1000",
]):
    add(f"digits_{i}", s)

# Whitespace
for i, s in enumerate([
    "a    b", "   ", "\t\t\tx", "a\r\nb\r\n\r\n", "\n\n\n", " \n \n", "x \t \n y", "a\u00a0b",
    "a\u3000b", "a\u2009b", "end   ", "\t", "\r", "\r\n", "\n \n  \n   ", "a\n\nb", "  \t  x",
    "x\t\ty", "line1\nline2\r\nline3\rline4", "\u2028\u2029", "a\u0085b", "\u0085\u0085 x",
    "a\u000bb\u000cc", " " * 100, "\n" * 50, "word" + " " * 20 + "word", "\ufeffHello", "x\ufeff y",
    "a \ufeff", "a\ufeff\ufeff!", "x\u0085\u0085!", "\u00a0\u00a0x", "a\u200bb", "a \u200b b", "a\u180eb", "tab\tseparated\tvalues\n1\t2\t3",
]):
    add(f"space_{i}", s)

# U+0085 (NEL) and U+FEFF (BOM) next to spaces: Oniguruma's \s (the reference regex engine) is
# Unicode White_Space, with NEL and without BOM; JavaScript's \s is the other way round.
for name, s in [
    ("nel_space_nel", "a\u0085 \u0085"), ("nel_between_spaces", "a \u0085 b"),
    ("nel_before_newlines", "a \u0085\n\nb"), ("nel_before_word", "the \u0085the"),
    ("nel_before_word2", "x \u0085the"), ("bom_before_letter", "a \ufeffb"),
    ("bom_before_word", "Hello \ufeffWorld"), ("bom_between_dots", ". \ufeff."),
]:
    add(name, s)

# Source code
for i, s in enumerate([
    "int main(int argc, char **argv) {\n    return 0;\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "for (size_t i = 0; i < n; i++) { a[i] += b[i] * 2; }",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "<!DOCTYPE html>\n<html><body class=\"x\"><p>Hi&nbsp;there</p></body></html>",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%o''k%';",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "const re = /^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@/i;",
    "fn main() -> Result<(), Box<dyn Error>> {\n    println!(\"{:?}\", vec![1, 2]);\n    Ok(())\n}",
    "    indented    code\n        more\n",
    "if x:\r\n    y = 1\r\n",
    "// comment\n/* block */\n#include <stdio.h>\n",
    "a = b if c else d  # type: ignore[attr-defined]",
    "x => x.map(y => y * 2).filter(Boolean)",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new\n",
    "```python\nprint('hi')\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
]):
    add(f"code_{i}", s)

# Special-token strings inside text
for i, s in enumerate([
    "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "<think>x</think>", "<|im_end", "<<|im_end|>>",
    "<|im_end|><|im_end|>", "text<|im_end|>text", " <|im_end|> ", "<|im_start|>", "<|IM_END|>",
    "<|im_end|>\n<|im_start|>assistant\n", "<tool_call>{}</tool_call>", "<|vision_pad|><|image_pad|>",
    "<｜begin▁of▁sentence｜>Hello", "<｜User｜>hi<｜Assistant｜>", "<｜end▁of▁sentence｜>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<|endoftext|><|endoftext|>x", "<think>\n\n</think>\n\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n", "< |im_end| >", "<|im_end|>" * 5,
]):
    add(f"special_{i}", s)

# Control characters and oddities
for i, s in enumerate([
    "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m", "\ufffd", "\ufffd\ufffd",
    "\U0010ffff", "\ue000 private", "\ud7ff", "\uffff", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "𝟘𝟙𝟚", "™ © ®",
    "→ ← ↑ ↓ ⇒", "∀x∈ℝ: x² ≥ 0", "…", "— – -", "«guillemets» „Anführung“", "♠♣♥♦",
]):
    add(f"misc_{i}", s)

# Not valid UTF-8 (encoded after U+FFFD substitution of maximal subparts)
for i, b in enumerate([
    b"\xff", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xe2\x28\xa1",
    b"Hell\xffo", b"abc\xe2\x82", b"\xf0\x9f\x98", b"\xf0\x9f\x98 x", b"\xc3", b"\xc3\x28",
    b"\xfe\xfe\xff\xff", b"ok \xe6\x97\xa5\xe6\x9c text", b"\xa0\xa1", b"\xf8\x88\x80\x80\x80",
    b"<|im_end|>\xff<|im_end|>", b"\xef\xbb\xbf\xff", b"caf\xe9",
]):
    addhex(f"invalid_{i}", b)

names = [c["name"] for c in cases]
assert len(names) == len(set(names))
assert len(cases) >= 200, len(cases)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stress.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=True, indent=0)
    f.write("\n")
print(f"{out}: {len(cases)} cases")
