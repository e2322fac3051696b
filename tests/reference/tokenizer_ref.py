"""shardnode's byte-level BPE against an independent encoder and trainer.

    /usr/bin/python3 tests/reference/tokenizer_ref.py --shardnode build/shardnode --workdir DIR

Python's standard library only (HF `tokenizers` is not installed). The
reference reads the tokenizer.json that shardnode writes and encodes the
way HF `tokenizers` does: added tokens cut out, the split regex (GPT-2's,
or Llama 3's), written out by hand over unicodedata categories because
Python's `re` has no \\p{L}, then BPE on each chunk applying the pair of
lowest rank, leftmost first. Bytes that are not valid UTF-8 (which HF never
sees) are chunks of their own, each maximal run one chunk, as shardnode
documents. It checks:
  - `tokenizer train` on 1 MB of the King James Bible writes an HF-shaped
    tokenizer.json (vocabulary, merges, <|endoftext|> last);
  - `tokenizer encode` gives the reference's ids on ~300 KB of other KJV text
    and on random text of many scripts, whitespace kinds, emoji, digits,
    NULs and invalid UTF-8; with --special, "<|endoftext|>" is one token;
  - encode | decode gives the input back byte for byte;
  - the same vocabulary and merges under Llama 3's Split pre-tokenizer (and
    ignore_merges) encode as the reference's Llama 3 regex does;
  - training on a small corpus learns exactly the merges of a naive trainer
    that recounts every pair before each merge;
  - bad ids and a non-BPE tokenizer.json get one clear line and exit 1.
"""

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import time
import unicodedata

TIMEOUT_S = 300
GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"
                r"|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EOT = "<|endoftext|>"

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


# ------------------------------------------------------------ byte alphabet --

def bytes_to_unicode():
    """GPT-2's table, as published with GPT-2."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def to_alphabet(b):
    return "".join(BYTE_CHAR[x] for x in b)


def from_alphabet(s):
    return bytes(CHAR_BYTE[c] for c in s)


# ------------------------------------------------------- character classes --

def is_ws(c):
    # White_Space as Oniguruma (HF) has it: \t \n \v \f \r, U+0085, Z*.
    return c in "\t\n\x0b\x0c\r\x85" or unicodedata.category(c) in ("Zs", "Zl", "Zp")


def is_letter(c):
    return unicodedata.category(c).startswith("L")


def is_number(c):
    return unicodedata.category(c).startswith("N")


def is_other(c):
    return not (is_ws(c) or is_letter(c) or is_number(c))


def run_end(s, i, cls):
    while i < len(s) and cls(s[i]):
        i += 1
    return i


def ws_tail(s, i):
    """\\s+(?!\\S)|\\s+ at s[i] (a whitespace character): the whole run at
    the end of the text, else the run less its last character (which then
    leads the next chunk), but at least one character."""
    k = run_end(s, i, is_ws)
    if k == len(s) or k - i < 2:
        return k
    return k - 1


def gpt2_chunks(s):
    out, i = [], 0
    while i < len(s):
        c, end = s[i], None
        for k in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
            if s.startswith(k, i):
                end = i + len(k)
                break
        for cls in (is_letter, is_number, is_other):
            if end is not None:
                break
            if c == " " and i + 1 < len(s) and cls(s[i + 1]):
                end = run_end(s, i + 1, cls)
            elif cls(c):
                end = run_end(s, i, cls)
        if end is None:
            end = ws_tail(s, i)
        out.append(s[i:end])
        i = end
    return out


def caseless_at(s, i, word):
    """(?i:word) at s[i]; Unicode case folding makes ſ (U+017F) an s."""
    if i + len(word) > len(s):
        return False
    for k, w in enumerate(word):
        c = s[i + k]
        if not (c.lower() == w or (w == "s" and c == "\u017f")):
            return False
    return True


def llama3_chunks(s):
    out, i = [], 0
    newline = lambda ch: ch in "\r\n"
    while i < len(s):
        c, end = s[i], None
        for k in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
            if caseless_at(s, i, k):
                end = i + len(k)
                break
        if end is None:  # [^\r\n\p{L}\p{N}]?\p{L}+
            if not (newline(c) or is_letter(c) or is_number(c)) and i + 1 < len(s) \
                    and is_letter(s[i + 1]):
                end = run_end(s, i + 1, is_letter)
            elif is_letter(c):
                end = run_end(s, i, is_letter)
        if end is None and is_number(c):  # \p{N}{1,3}
            end = i + 1
            while end < len(s) and end - i < 3 and is_number(s[end]):
                end += 1
        if end is None:  # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
            j = i + 1 if c == " " and i + 1 < len(s) and is_other(s[i + 1]) else i
            if is_other(s[j]):
                end = run_end(s, run_end(s, j, is_other), newline)
        if end is None:  # \s*[\r\n]+ : up to the last newline of the whitespace run
            k = run_end(s, i, is_ws)
            last = max((j for j in range(i, k) if newline(s[j])), default=None)
            end = last + 1 if last is not None else ws_tail(s, i)
        out.append(s[i:end])
        i = end
    return out


# ------------------------------------------------------- UTF-8 validity ---

def valid_len(b, i):
    """Length of the strict UTF-8 sequence at b[i] (as Python's decoder
    accepts it: no overlong forms, surrogates or code points past
    U+10FFFF), or 0."""
    c = b[i]
    if c < 0x80:
        return 1
    n = 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
    if n == 0 or i + n > len(b):
        return 0
    try:
        b[i:i + n].decode("utf-8")
        return n
    except UnicodeDecodeError:
        return 0


def byte_chunks(data, split):
    """Chunks of bytes: valid UTF-8 runs split by `split`, each maximal run
    of invalid bytes one chunk."""
    out, i = [], 0
    while i < len(data):
        j = i
        while j < len(data):
            n = valid_len(data, j)
            if not n:
                break
            j += n
        if j > i:
            out += [c.encode("utf-8") for c in split(data[i:j].decode("utf-8"))]
        k = j
        while k < len(data) and not valid_len(data, k):
            k += 1
        if k > j:
            out.append(data[j:k])
        i = k
    return out


# ------------------------------------------------------------ the encoder ---

class Reference:
    def __init__(self, tok):
        m = tok["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.ranks = {}
        for r, line in enumerate(m["merges"]):
            a, b = line.split(" ") if isinstance(line, str) else line
            self.ranks[(a, b)] = r
        self.ignore_merges = m.get("ignore_merges", False)
        self.added = [(t["content"], t["id"], t["special"]) for t in tok["added_tokens"]]
        pre = tok["pre_tokenizer"]
        if pre["type"] == "ByteLevel":
            assert pre["use_regex"] and not pre["add_prefix_space"]
            self.split = gpt2_chunks
        else:
            assert pre["pretokenizers"][0]["pattern"]["Regex"] == LLAMA3_PATTERN
            self.split = llama3_chunks
        self.cache = {}

    def bpe(self, chunk):
        if chunk in self.cache:
            return self.cache[chunk]
        word = [BYTE_CHAR[b] for b in chunk]
        if self.ignore_merges and "".join(word) in self.vocab:
            word = ["".join(word)]
        while len(word) > 1:
            best = None
            for i in range(len(word) - 1):
                r = self.ranks.get((word[i], word[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            word[i:i + 2] = [word[i] + word[i + 1]]
        ids = [self.vocab[w] for w in word]
        self.cache[chunk] = ids
        return ids

    def encode(self, data, allow_special=False):
        active = [(c.encode("utf-8"), i) for c, i, sp in self.added if allow_special or not sp]
        ids, pos = [], 0
        while pos <= len(data):
            best = None
            for c, i in active:
                at = data.find(c, pos)
                if at >= 0 and (best is None or at < best[0] or
                                (at == best[0] and len(c) > len(best[1]))):
                    best = (at, c, i)
            end = best[0] if best else len(data)
            for chunk in byte_chunks(data[pos:end], self.split):
                ids += self.bpe(chunk)
            if not best:
                break
            ids.append(best[2])
            pos = end + len(best[1])
        return ids


# ------------------------------------------------------------ the trainer ---

def naive_train(data, vocab_size, specials):
    """Recounts every pair before each merge; ties to the smallest
    (left bytes, right bytes)."""
    assert len(specials) == 1
    words = collections.Counter()
    for piece in data.split(specials[0].encode("utf-8")):
        for c in byte_chunks(piece, gpt2_chunks):
            if len(c) > 1:
                words[c] += 1
    tokens = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    seqs = [[list(w), f] for w, f in words.items()]
    merges = []
    while len(tokens) < vocab_size - len(specials):
        counts = collections.Counter()
        for seq, f in seqs:
            for x, y in zip(seq, seq[1:]):
                counts[(x, y)] += f
        if not counts:
            break
        a, b = min(counts, key=lambda p: (-counts[p], tokens[p[0]], tokens[p[1]]))
        new = tokens[a] + tokens[b]
        if new not in index:
            index[new] = len(tokens)
            tokens.append(new)
        c = index[new]
        merges.append((a, b))
        for item in seqs:
            seq, out, i = item[0], [], 0
            while i < len(seq):
                if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                    out.append(c)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            item[0] = out
    return tokens, merges


# ------------------------------------------------------------ the inputs ---

WHITESPACE = ["\u00a0", "\u1680", "\u2000", "\u2007", "\u200a", "\u2028", "\u2029",
              "\u202f", "\u205f", "\u3000", "\u180e", "\x85", "\t", "\n", "\r", "\x0b",
              "\x0c", "  ", "   \n"]
LETTERS = list("aZéßΩжאع中文ひカ한ǅʰſ") + ["e\u0301"]
NUMBERS = list("0123456789٣²½Ⅻ①߁")
OTHERS = list("!?.,;:'\"()[]{}<>-_/\\|@#$%^&*~`+=") + ["\u0301", "\u0903", "\u200d",
                                                       "\u00ad", "\x00", "\x7f", "\u0378",
                                                       "\ue000", "\ufffe", "😀", "👍🏽",
                                                       "🇫🇷", "𝔘"]
PIECES = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "ſ", "'ſ", EOT,
          "<|endof", "Hello", " world", "1234567", "\r\n", " \r\n\r\n  "]
INVALID = [b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82",
           b"\xc0\xaf", b"\xf0\x9f\x98", b"\xfe\xfe"]


# Hand-picked cases: case-folded contractions (Llama 3 folds, GPT-2 does
# not), whitespace runs before words and at the end, digits in threes.
EDGES = ("'Saul'S'LLama'ſabc'Ve'd'RE don'T I'M they'll 'sun'tide\n"
         "  two spaces\tand tab\n\n\n  indented\r\n\r\nCRLF   \u3000\u3000x\u180ey "
         "1234567 ١٢٣٤ ½½ x²³ end   ").encode("utf-8")


def random_text(rng, n):
    out = []
    pools = [WHITESPACE, LETTERS, NUMBERS, OTHERS, PIECES, [" "]]
    while len(out) < n:
        pool = rng.choice(pools)
        item = rng.choice(pool)
        if rng.random() < 0.04:
            out.append(rng.choice(INVALID))
        elif pool is LETTERS and rng.random() < 0.5:
            out.append((" " + item * rng.randint(1, 6)).encode("utf-8"))
        else:
            out.append(item.encode("utf-8"))
    return b"".join(out)


def kjv_text():
    bible = shutil.which("bible")
    if not bible:
        sys.exit("tokenizer_ref.py: the `bible` program (Debian's bible-kjv) is missing")
    return subprocess.run([bible, "Gen1:1-Rev22:21"], stdout=subprocess.PIPE, check=True,
                          timeout=TIMEOUT_S).stdout


# --------------------------------------------------------------- running ---

def run(args, data=b""):
    p = subprocess.run(args, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=TIMEOUT_S)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def encode(sn, tok, data, special=False):
    rc, out, err = run([sn, "tokenizer", "encode", "--tokenizer", tok]
                       + (["--special"] if special else []), data)
    if rc != 0:
        raise RuntimeError("encode failed: " + err)
    return [int(x) for x in out.split()]


def decode(sn, tok, ids):
    rc, out, err = run([sn, "tokenizer", "decode", "--tokenizer", tok],
                       " ".join(map(str, ids)).encode())
    if rc != 0:
        raise RuntimeError("decode failed: " + err)
    return out


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(sn, tok_path, ref, name, data, special=False):
    got = encode(sn, tok_path, data, special)
    want = ref.encode(data, special)
    if got != want:
        i = first_difference(got, want)
        check(False, "%s: ids differ from the reference at %d of %d/%d: shardnode %s, "
              "reference %s" % (name, i, len(got), len(want), got[i:i + 8], want[i:i + 8]))
    back = decode(sn, tok_path, got)
    check(back == data, "%s: decode(encode(text)) is not the text (%d vs %d bytes, first "
          "difference at %d)" % (name, len(back), len(data), first_difference(back, data)))
    return got


def one_line_error(name, rc, err, needles):
    lines = [l for l in err.splitlines() if l.strip()]
    check(rc == 1, "%s: exit status %s, expected 1" % (name, rc))
    check(len(lines) == 1 and "Sanitizer" not in err and "runtime error" not in err,
          "%s: expected one line on stderr, got %r" % (name, err))
    for n in needles:
        check(n in err, "%s: message %r does not name %r" % (name, err.strip(), n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    sn, wd = a.shardnode, a.workdir
    os.makedirs(wd, exist_ok=True)
    t0 = time.time()
    rng = random.Random(1234)

    kjv = kjv_text()
    corpus = os.path.join(wd, "kjv_1mb.txt")
    with open(corpus, "wb") as f:
        f.write(kjv[:1 << 20])
    tok_path = os.path.join(wd, "tokenizer.json")
    rc, out, err = run([sn, "tokenizer", "train", "--input", corpus, "--vocab-size", "3000",
                        "--out", tok_path])
    if rc != 0:
        print("FAIL: tokenizer train: " + err, file=sys.stderr)
        return 1
    with open(tok_path, encoding="utf-8") as f:
        tok = json.load(f)
    m = tok["model"]
    check(m["type"] == "BPE" and len(m["vocab"]) == 2999 and len(m["merges"]) >= 2743,
          "trained tokenizer.json: %s, %d vocab, %d merges" % (m["type"], len(m["vocab"]),
                                                               len(m["merges"])))
    check([(t["content"], t["id"], t["special"]) for t in tok["added_tokens"]]
          == [(EOT, 2999, True)], "added_tokens: %r" % tok["added_tokens"])
    check(tok["pre_tokenizer"]["type"] == "ByteLevel" and tok["decoder"]["type"] == "ByteLevel",
          "pre_tokenizer/decoder are not ByteLevel")
    check(sorted(m["vocab"].values()) == list(range(2999)), "vocabulary ids are not 0..2998")
    ref = Reference(tok)

    # Other KJV text, random text of many kinds, and specials.
    compare(sn, tok_path, ref, "KJV 300 KB", kjv[2 << 20:(2 << 20) + 300000])
    for k in range(4):
        compare(sn, tok_path, ref, "random text %d" % k, random_text(rng, 6000))
    compare(sn, tok_path, ref, "random bytes", bytes(rng.randrange(256) for _ in range(20000)))
    compare(sn, tok_path, ref, "empty", b"")
    compare(sn, tok_path, ref, "edge cases", EDGES)
    text = b"In the beginning" + EOT.encode() + b"was the Word" + EOT.encode()
    plain = compare(sn, tok_path, ref, "special as text", text)
    check(2999 not in plain, "without --special, <|endoftext|> must stay text")
    spec = compare(sn, tok_path, ref, "special", text, special=True)
    check(spec.count(2999) == 2 and spec[-1] == 2999, "with --special: %r" % spec)

    # Llama 3's pre-tokenizer over the same vocabulary and merges.
    llama = json.loads(json.dumps(tok))
    llama["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    # Without every fifth merge many vocabulary tokens are out of BPE's reach:
    # only ignore_merges (whole chunk in the vocabulary) produces them.
    llama["model"]["ignore_merges"] = True
    llama["model"]["merges"] = [l.split(" ") for i, l in enumerate(llama["model"]["merges"])
                                if i % 5 != 4]
    # Tokens across the boundary that (?i:'s) makes in "'Saul" and "'ſabc".
    for a, b in (("S", "a"), ("Sa", "u"), ("Sau", "l"), ("Å", "¿"), ("Å¿", "a")):
        llama["model"]["vocab"].setdefault(a + b, len(llama["model"]["vocab"]) + 1)
        llama["model"]["merges"].insert(0, [a, b])
    llama_path = os.path.join(wd, "llama3_style.json")
    with open(llama_path, "w", encoding="utf-8") as f:
        json.dump(llama, f, ensure_ascii=False)
    lref = Reference(llama)
    compare(sn, llama_path, lref, "Llama 3 regex, KJV", kjv[3 << 20:(3 << 20) + 100000])
    compare(sn, llama_path, lref, "Llama 3 regex, edge cases", EDGES)
    for k in range(3):
        compare(sn, llama_path, lref, "Llama 3 regex, random %d" % k, random_text(rng, 6000))

    # Training against the naive trainer.
    small = kjv[:30000] + random_text(rng, 3000) + EOT.encode() + kjv[-5000:]
    small_path = os.path.join(wd, "small.txt")
    with open(small_path, "wb") as f:
        f.write(small)
    small_tok = os.path.join(wd, "small.json")
    rc, out, err = run([sn, "tokenizer", "train", "--input", small_path, "--vocab-size", "600",
                        "--out", small_tok])
    check(rc == 0, "train on the small corpus: " + err)
    if rc == 0:
        tokens, merges = naive_train(small, 600, [EOT])
        with open(small_tok, encoding="utf-8") as f:
            st = json.load(f)
        got_merges = [tuple(from_alphabet(x) for x in l.split(" "))
                      for l in st["model"]["merges"]]
        want_merges = [(tokens[x], tokens[y]) for x, y in merges]
        if got_merges != want_merges:
            i = first_difference(got_merges, want_merges)
            check(False, "training: merge %d differs: shardnode %r, naive %r" %
                  (i, got_merges[i:i + 3], want_merges[i:i + 3]))
        got_vocab = {from_alphabet(s): i for s, i in st["model"]["vocab"].items()}
        check(got_vocab == {t: i for i, t in enumerate(tokens)},
              "training: vocabulary differs from the naive trainer's")

    # Errors: one line, exit 1, naming what is wrong.
    rc, out, err = run([sn, "tokenizer", "decode", "--tokenizer", tok_path], b"5 17 99999 3")
    one_line_error("decode of an unknown id", rc, err, ["99999", "position 2"])
    rc, out, err = run([sn, "tokenizer", "decode", "--tokenizer", tok_path], b"5 x7 3")
    one_line_error("decode of a word", rc, err, ["x7", "position 1"])
    wp = json.loads(json.dumps(tok))
    wp["model"]["type"] = "WordPiece"
    wp_path = os.path.join(wd, "wordpiece.json")
    with open(wp_path, "w") as f:
        json.dump(wp, f)
    rc, out, err = run([sn, "tokenizer", "encode", "--tokenizer", wp_path], b"hi")
    one_line_error("WordPiece tokenizer", rc, err, [wp_path, "WordPiece"])
    rc, out, err = run([sn, "tokenizer", "encode", "--tokenizer",
                        os.path.join(wd, "missing.json")], b"hi")
    one_line_error("missing tokenizer", rc, err, ["missing.json"])

    print("tokenizer_ref: %s in %.1f s" % ("FAILED (%d)" % len(failures) if failures else "ok",
                                           time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
