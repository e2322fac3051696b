"""What the bench/ scripts share: running shardnode, the KJV corpus with its
tokenizer in a work dir (kept between runs), and free_ports, which is the
integration tests' (tests/integration/nslib.py, standard library only, as
bench already takes llama_ref from tests/reference). Standard library only."""

import argparse
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from nslib import free_ports  # noqa: E402

__all__ = ["die", "run", "kjv_corpus_and_tokenizer", "free_ports", "bench_parser"]


def die(msg):
    sys.exit("%s: %s" % (os.path.splitext(os.path.basename(sys.argv[0]))[0], msg))


def bench_parser(doc, rounds):
    """The argument parser of a bench that interleaves rounds of its sides:
    described by doc's first paragraph, with --shardnode (default
    build/shardnode in the repo) and --rounds R (default rounds)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--shardnode", default=os.path.join(REPO, "build", "shardnode"),
                    help="the shardnode binary (default: build/shardnode in the repo)")
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds (R)")
    return ap


def run(cmd, timeout, cwd, env=None):
    """Runs cmd; returns its stdout as text, or exits naming the command."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        die("timed out after %d s: %s" % (timeout, " ".join(cmd)))
    except OSError as e:
        die("cannot run %s: %s" % (cmd[0], e))
    if p.returncode != 0:
        die("exit status %d: %s\n%s%s" % (p.returncode, " ".join(cmd),
                                           p.stdout.decode(errors="replace"),
                                           p.stderr.decode(errors="replace")))
    return p.stdout.decode(errors="replace")


def kjv_corpus_and_tokenizer(wd, shardnode, vocab, env=None):
    """wd/kjv.txt (the whole King James Bible, Debian's bible-kjv) and
    wd/tok.json (`shardnode tokenizer train`), made once and kept."""
    os.makedirs(wd, exist_ok=True)
    corpus = os.path.join(wd, "kjv.txt")
    tok = os.path.join(wd, "tok.json")
    if not os.path.isfile(corpus) or os.path.getsize(corpus) == 0:
        try:
            with open(corpus + ".tmp", "wb") as f:
                p = subprocess.run(["bible", "Gen1:1-Rev22:21"], stdout=f,
                                   stderr=subprocess.PIPE, timeout=600)
        except OSError as e:
            die("cannot run `bible` (Debian package bible-kjv): %s" % e)
        if p.returncode != 0:
            die("`bible 'Gen1:1-Rev22:21'` failed: %s" % p.stderr.decode(errors="replace"))
        os.replace(corpus + ".tmp", corpus)
    if not os.path.isfile(tok):
        run([shardnode, "tokenizer", "train", "--input", corpus, "--vocab-size", str(vocab),
             "--out", tok], 600, wd, env)
    return corpus, tok

