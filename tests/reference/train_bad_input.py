"""`shardnode train` must refuse bad jobs, corpora, tokenizers, output dirs
and checkpoints with one clear line, and lose nothing already written.

    /usr/bin/python3 tests/reference/train_bad_input.py --shardnode build/shardnode --workdir DIR

Writes a corpus (Genesis from Debian's bible-kjv), a tokenizer trained on
it, a small model config and a valid job, and trains that job to the end in
a "victim" out_dir (checkpoint.safetensors, model.safetensors, config.json,
tokenizer.json, data-cache.bin, and the --metrics file kept inside it).
Then, for each bad input (a missing, empty or too short corpus, an unknown
key, values of the wrong type, an out_dir under a regular file, a tokenizer
that is not BPE, --resume from a checkpoint of another model config, a torn
checkpoint, --resume with no checkpoint, a missing job file, a JSON syntax
error, a config of a million layers, a step of 2^40 tokens, ...) it runs
`shardnode train` against that out_dir and metrics file
and asserts:
  - the exit status is non-zero (and not a signal);
  - stderr is exactly one non-empty line, with no sanitizer report in it;
  - that line names the offending file, and the key (with its line:column
    in the job) or what differs, as each case requires;
  - every file that existed before (the victim dir, the case's own files) is
    byte-identical afterwards, and no new file is left behind except a data
    cache (data-cache.bin) in an out_dir that had none.
Exits non-zero listing every case that failed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

PROCESS_TIMEOUT_S = 120
PASSAGE = "Gen1:1-Gen50:26"
SANITIZER_WORDS = ("runtime error", "Sanitizer", "AddressSanitizer", "LeakSanitizer",
                   "ERROR:", "Segmentation", "Aborted")


def run(cmd):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %d s" % PROCESS_TIMEOUT_S
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    with open(path) as f:
        return f.read()


def position(text, needle):
    """"line:column" (1-based) of the first occurrence of needle in text."""
    i = text.index(needle)
    line = text.count("\n", 0, i) + 1
    col = i - (text.rfind("\n", 0, i) + 1) + 1
    return "%d:%d" % (line, col)


def snapshot(paths):
    """dict path -> bytes of every file under the given files and dirs."""
    out = {}
    for p in paths:
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[p] = f.read()
        elif os.path.isdir(p):
            for root, _, files in os.walk(p):
                for name in files:
                    full = os.path.join(root, name)
                    with open(full, "rb") as f:
                        out[full] = f.read()
    return out


class Setup:
    def __init__(self, shardnode, workdir):
        self.shardnode = shardnode
        self.workdir = workdir
        self.corpus = self.path("genesis.txt")
        self.tokenizer = self.path("tokenizer.json")
        self.config_a = self.path("config-a.json")
        self.config_b = self.path("config-b.json")
        self.victim = self.path("victim")
        self.metrics = os.path.join(self.victim, "metrics.jsonl")

    def path(self, *names):
        return os.path.join(self.workdir, *names)

    def job(self, **over):
        j = {
            "config": self.config_a,
            "tokenizer": self.tokenizer,
            "data": {"files": [self.corpus], "format": "text", "separator": "\n\n",
                     "val_fraction": 0.05},
            "seq_len": 32, "batch": 8, "micro_batch": 4, "steps": 4,
            "lr": 3e-3, "warmup_steps": 1, "seed": 3, "val_interval": 2, "val_batches": 2,
            "checkpoint_interval": 2, "out_dir": self.victim,
        }
        j.update(over)
        return j

    def data(self, **over):
        d = dict(self.job()["data"])
        d.update(over)
        return d


def model_config(hidden):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": hidden, "intermediate_size": 176, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
            "rms_norm_eps": 1e-5, "max_position_embeddings": 64, "torch_dtype": "float32"}


def prepare(s):
    bible = shutil.which("bible")
    if not bible:
        sys.exit("train_bad_input: the `bible` command is missing: install Debian's bible-kjv "
                 "(scripts/deps.sh)")
    rc, text, err = run([bible, PASSAGE])
    if rc != 0 or len(text) < 100000:
        sys.exit("train_bad_input: `bible %s` failed: %s" % (PASSAGE, err.strip()))
    with open(s.corpus, "w") as f:
        f.write(text)
    rc, _, err = run([s.shardnode, "tokenizer", "train", "--input", s.corpus, "--vocab-size",
                      "512", "--out", s.tokenizer])
    if rc != 0:
        sys.exit("train_bad_input: tokenizer train failed: %s" % err.strip())
    write_json(s.config_a, model_config(64))
    write_json(s.config_b, model_config(96))
    shutil.rmtree(s.victim, ignore_errors=True)
    os.makedirs(s.victim)
    with open(os.path.join(s.victim, "notes.txt"), "w") as f:
        f.write("a file of the user's: failing runs must leave it alone\n")
    good = s.path("good.json")
    write_json(good, s.job())
    cmd = [s.shardnode, "train", "--job", good, "--metrics", s.metrics, "--threads", "2"]
    rc, out, err = run(cmd)
    if rc != 0:
        print("FAIL valid job: exit status %s\n     command: %s\n     stderr: %s"
              % (rc, " ".join(cmd), err.strip()))
        sys.exit(1)
    for name in ("checkpoint.safetensors", "model.safetensors", "config.json",
                 "tokenizer.json", "data-cache.bin", "metrics.jsonl"):
        if not os.path.isfile(os.path.join(s.victim, name)):
            sys.exit("train_bad_input: the valid job left no %s in %s" % (name, s.victim))
    print("ok   valid job: %s trains; victim out_dir holds %s"
          % (good, ", ".join(sorted(os.listdir(s.victim)))))


# ------------------------------------------------------------- the cases ---

def make_cases(s):
    """List of dicts: name, argv (after `shardnode train`), must (substrings
    the stderr line must contain), keep (extra files and dirs that must stay
    as they are; the victim dir always must)."""
    cases = []

    def case(name, job=None, job_text=None, extra=(), must=(), keep=(), job_name=None):
        path = s.path(job_name or "case-%02d.json" % (len(cases) + 1))
        if job is not None:
            job_text = write_json(path, job)
        elif job_text is not None:
            with open(path, "w") as f:
                f.write(job_text)
        argv = ["--job", path, "--metrics", s.metrics, "--threads", "2"] + list(extra)
        cases.append(dict(name=name, argv=argv, must=[m(path, job_text) if callable(m) else m
                                                      for m in must], keep=list(keep)))

    # corpora
    missing = s.path("no-such-corpus.txt")
    case("missing corpus file", s.job(data=s.data(files=[missing])), must=[missing])
    empty = s.path("empty.txt")
    open(empty, "w").close()
    case("empty corpus", s.job(data=s.data(files=[empty])), must=[empty])
    blank = s.path("only-separators.txt")
    with open(blank, "w") as f:
        f.write("\n\n\n\n\n\n")
    case("corpus of separators only", s.job(data=s.data(files=[blank])), must=[blank])
    short = s.path("short.txt")
    with open(short, "w") as f:
        f.write("In the beginning God created the heaven and the earth.\n")
    case("corpus shorter than one sequence", s.job(data=s.data(files=[short])), must=[short])
    case("corpus is a directory", s.job(data=s.data(files=[s.workdir])), must=[s.workdir])

    # the job's keys and types: the key and its line:column
    def at(key):
        return lambda path, text: "%s:%s" % (path, position(text, '"%s"' % key))

    j = s.job()
    j["bogus_key"] = 1
    case("unknown key", j, must=["bogus_key", at("bogus_key")])
    case("unknown key in data", s.job(data=dict(s.data(), filez=["x.txt"])),
         must=["filez", at("filez")])
    case("seq_len is a string", s.job(seq_len="32"), must=["seq_len", at("seq_len")])
    case("lr is a string", s.job(lr="fast"), must=["lr", at("lr")])
    case("batch is not an integer", s.job(batch=8.5), must=["batch", at("batch")])
    case("data.files is a string", s.job(data=s.data(files=s.corpus)),
         must=["files", at("files")])
    case("resume is not a job key", s.job(resume=True), must=["resume", at("resume")])

    # output dir: a path whose parent is a regular file (root ignores
    # permission bits, so this is the way to make a dir that cannot be made)
    plain = s.path("a-regular-file")
    with open(plain, "w") as f:
        f.write("not a directory\n")
    bad_out = os.path.join(plain, "out")
    case("out_dir under a regular file", s.job(out_dir=bad_out), must=[bad_out], keep=[plain])
    case("--metrics under a regular file", s.job(),
         extra=["--metrics", os.path.join(plain, "m.jsonl")],
         must=[os.path.join(plain, "m.jsonl")], keep=[plain])

    # tokenizer
    with open(s.tokenizer) as f:
        tok = json.load(f)
    tok["model"]["type"] = "WordPiece"
    wordpiece = s.path("wordpiece.json")
    write_json(wordpiece, tok)
    case("tokenizer is WordPiece", s.job(tokenizer=wordpiece), must=[wordpiece, "WordPiece"])
    case("missing tokenizer", s.job(tokenizer=s.path("no-such-tokenizer.json")),
         must=[s.path("no-such-tokenizer.json")])
    case("missing config", s.job(config=s.path("no-such-config.json")),
         must=[s.path("no-such-config.json")])
    case("missing init_weights", s.job(init_weights=s.path("no-such-weights.safetensors")),
         must=[s.path("no-such-weights.safetensors")])

    # checkpoints
    ckpt = os.path.join(s.victim, "checkpoint.safetensors")
    case("--resume with a checkpoint of another model config", s.job(config=s.config_b),
         extra=["--resume"], must=[ckpt, "hidden_size", "64", "96"])
    case("--resume after the job's seed changed", s.job(seed=99), extra=["--resume"],
         must=[ckpt, "seed", "now 99"])
    case("--resume after the job's lr changed", s.job(lr=0.5), extra=["--resume"],
         must=[ckpt, "\"lr\""])
    torn_dir = s.path("torn-checkpoint")
    shutil.rmtree(torn_dir, ignore_errors=True)
    os.makedirs(torn_dir)
    with open(ckpt, "rb") as f:
        blob = f.read()
    with open(os.path.join(torn_dir, "checkpoint.safetensors"), "wb") as f:
        f.write(blob[:len(blob) * 2 // 5])
    case("--resume with a torn checkpoint", s.job(out_dir=torn_dir), extra=["--resume"],
         must=[os.path.join(torn_dir, "checkpoint.safetensors")], keep=[torn_dir])
    fresh = s.path("no-checkpoint")
    shutil.rmtree(fresh, ignore_errors=True)
    os.makedirs(fresh)
    with open(os.path.join(fresh, "metrics.jsonl"), "w") as f:
        f.write('{"step": 1, "loss": 1}\n')
    case("--resume with no checkpoint", s.job(out_dir=fresh),
         extra=["--resume", "--metrics", os.path.join(fresh, "metrics.jsonl")],
         must=[os.path.join(fresh, "checkpoint.safetensors")], keep=[fresh])

    # absurd sizes: refused with the memory a stage would need, before any of
    # it is allocated (a million layers used to calloc their tables first)
    huge = s.path("config-huge.json")
    write_json(huge, dict(model_config(64), num_hidden_layers=1000000))
    case("a config of a million layers", s.job(config=huge),
         must=["[0, 1000000)", "needs", "memory"])
    case("a step of 2^20 x 2^20 tokens", s.job(seq_len=1 << 20, batch=1 << 20, micro_batch=1),
         must=["\"batch\"", "\"seq_len\"", "tokens per step"])

    # the job file itself
    case("missing job file", job_name="no-such-job.json",
         must=[s.path("no-such-job.json")])
    good_text = json.dumps(s.job(), indent=2)
    broken = good_text.replace('"batch": 8,', '"batch": 8,,', 1)
    assert broken != good_text
    line = broken[:broken.index(",,")].count("\n") + 1
    case("JSON syntax error", job_text=broken,
         must=[lambda path, text: "%s:%d:" % (path, line)])
    case("job is not an object", job_text="[1, 2, 3]\n", must=[lambda path, text: path])
    case("empty job file", job_text="", must=[lambda path, text: path])
    case("duplicate key", job_text=good_text.replace('"batch": 8,', '"batch": 8, "batch": 4,'),
         must=[lambda path, text: path, "batch"])
    return cases


def check_case(s, c):
    """Returns (ok, report)."""
    watched = [s.victim] + c["keep"]
    before = snapshot(watched)
    cmd = [s.shardnode, "train"] + c["argv"]
    rc, out, err = run(cmd)
    after = snapshot(watched)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    problems = []
    if rc is None:
        problems.append(err)
    elif rc == 0:
        problems.append("exit status 0")
    elif rc < 0:
        problems.append("killed by signal %d" % -rc)
    if any(w in err for w in SANITIZER_WORDS):
        problems.append("sanitizer or crash report on stderr")
    if len(lines) != 1 or len(err.splitlines()) != 1:
        problems.append("stderr has %d lines, expected exactly one non-empty line"
                        % len(err.splitlines()))
    line = lines[0] if lines else ""
    for m in c["must"]:
        if m not in line:
            problems.append("the line does not name %r" % m)
    for p, data in before.items():
        if p not in after:
            problems.append("%s was deleted" % p)
        elif after[p] != data:
            problems.append("%s was changed" % p)
    for p in after:
        if p not in before and os.path.basename(p) != "data-cache.bin":
            problems.append("%s was left behind" % p)
    if not problems:
        return True, "ok   %-52s %s" % (c["name"], line)
    report = "FAIL %s: %s\n     command: %s\n     exit status: %s\n     stderr: %s" % (
        c["name"], "; ".join(problems), " ".join(cmd), rc,
        "\n             ".join(err.splitlines()) or "(empty)")
    return False, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", required=True, help="path of the shardnode binary")
    ap.add_argument("--workdir", required=True, help="directory for the generated files")
    args = ap.parse_args()
    shardnode = os.path.abspath(args.shardnode)
    if not os.access(shardnode, os.X_OK):
        sys.exit("train_bad_input: %s is not an executable file" % shardnode)
    os.makedirs(args.workdir, exist_ok=True)
    s = Setup(shardnode, os.path.abspath(args.workdir))
    t0 = time.time()
    prepare(s)
    failures = []
    cases = make_cases(s)
    for c in cases:
        ok, report = check_case(s, c)
        print(report)
        if not ok:
            failures.append(c["name"])
    if failures:
        print("\ntrain_bad_input: %d of %d cases failed: %s" % (len(failures), len(cases),
                                                              ", ".join(failures)))
        sys.exit(1)
    print("train_bad_input: all %d bad inputs refused with one line, nothing lost (%.1f s)"
          % (len(cases), time.time() - t0))


if __name__ == "__main__":
    main()
