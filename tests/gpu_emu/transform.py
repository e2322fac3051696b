"""kernels/gpu's sources rewritten as host C++ for the emulated backend
(tests/gpu_emu/README.md). Python 3, standard library only.

    transform.py --out DIR FILE...

Each FILE (kernels/gpu/*.cu and *.h) is written to DIR: X.cu as X.cpp, a
header under its own name, after a `#line 1 "FILE"` so that compiler
messages and the emulation's reports name the real source and line. Only
what host C++ cannot say is rewritten; every line keeps its number:

  name<<<grid, block[, shmem[, stream]]>>>(args)
      -> ::emu::launch("name", "file:line", BOUND, ::emu::to_dim3(grid),
                       ::emu::to_dim3(block), (size_t)(shmem),
                       ::emu::to_stream(stream), name, args)
         BOUND: the kernel's __launch_bounds__ (0 without), checked at launch
  __shared__ T x[...];     -> static T x[...]; EMU_SHARED_FRESH(x);
                              (fresh, 0xff-filled, in every block)
  extern __shared__ T x[]; -> T *const x = (T *)::emu::dynamic_shared();
  #pragma unroll [N]       -> #pragma GCC unroll N (16 without N)

The CUDA keywords (__global__, __device__, __forceinline__,
__launch_bounds__) are macros of include/emu_device.h; the runtime names come
from include/'s stand-in headers, which compat.h includes. Anything the
rewriting does not understand (a launch it cannot parse, a __shared__
declaration of another form, __constant__ or __managed__ memory) stops it
with the file and line: never a silent partial translation."""

import argparse
import os
import re
import sys


class Refused(Exception):
    pass


def blank_comments_and_literals(text):
    """text with comments and string/char literals replaced by spaces
    (newlines kept): the positions of code are those of text."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if text[k] != "\n":
                    out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def matching(blank, pos, open_ch, close_ch):
    """index of the bracket closing the one at pos (forward)"""
    depth = 0
    for k in range(pos, len(blank)):
        if blank[k] == open_ch:
            depth += 1
        elif blank[k] == close_ch:
            depth -= 1
            if depth == 0:
                return k
    return -1


def split_top(blank, text, lo, hi):
    """text[lo:hi] split at the commas outside brackets (found in blank)"""
    parts, depth, start = [], 0, lo
    for k in range(lo, hi):
        ch = blank[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:hi])
    return [p.strip() for p in parts]


def launch_bounds(blank):
    """kernel name -> its __launch_bounds__ expression"""
    bounds = {}
    for m in re.finditer(r"__launch_bounds__\s*\(", blank):
        close = matching(blank, m.end() - 1, "(", ")")
        if close < 0:
            continue
        expr = blank[m.end():close].split(",")[0].strip()
        d = re.match(r"\s*void\s+([A-Za-z_]\w*)\s*\(", blank[close + 1:])
        if d:
            bounds[d.group(1)] = expr
    return bounds


def rewrite(path, text):
    rel = os.path.basename(path)
    blank = blank_comments_and_literals(text)
    edits = []  # (start, end, replacement)

    def refuse(pos, why):
        raise Refused("%s:%d: %s" % (path, line_of(text, pos), why))

    for word in ("__constant__", "__managed__"):
        m = re.search(r"\b%s\b" % word, blank)
        if m:
            refuse(m.start(), "%s memory is not emulated (add it to tests/gpu_emu)" % word)

    bounds = launch_bounds(blank)

    # kernel launches
    pos = 0
    while True:
        i = blank.find("<<<", pos)
        if i < 0:
            break
        j = blank.find(">>>", i + 3)
        if j < 0:
            refuse(i, "a <<< without its >>>")
        cfg = split_top(blank, text, i + 3, j)
        if not 2 <= len(cfg) <= 4 or not all(cfg):
            refuse(i, "a launch configuration of %d parts (grid, block[, shmem[, stream]])"
                   % len(cfg))
        # the kernel's name, with template arguments, before <<<
        k = i
        while k > 0 and blank[k - 1].isspace():
            k -= 1
        name_end = k
        if k > 0 and blank[k - 1] == ">":
            depth = 0
            while k > 0:
                k -= 1
                if blank[k] == ">":
                    depth += 1
                elif blank[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            if depth != 0:
                refuse(i, "unbalanced template arguments before <<<")
            while k > 0 and blank[k - 1].isspace():
                k -= 1
        base_end = k
        while k > 0 and (blank[k - 1].isalnum() or blank[k - 1] in "_:"):
            k -= 1
        base = blank[k:base_end].strip()
        if not re.fullmatch(r"[A-Za-z_][\w:]*", base):
            refuse(i, "no kernel name before <<<")
        name = re.sub(r"\s+", " ", text[k:name_end].strip())
        # the arguments
        a = j + 3
        while a < len(blank) and blank[a].isspace():
            a += 1
        if a >= len(blank) or blank[a] != "(":
            refuse(j, "no argument list after >>>")
        close = matching(blank, a, "(", ")")
        if close < 0:
            refuse(a, "unbalanced parentheses in a launch")
        args = text[a + 1:close].strip()
        shmem = cfg[2] if len(cfg) > 2 else "0"
        stream = cfg[3] if len(cfg) > 3 else "0"
        bound = bounds.get(base.split("::")[-1], "0")
        rep = ('::emu::launch("%s", "%s:%d", %s, ::emu::to_dim3(%s), ::emu::to_dim3(%s), '
               "(size_t)(%s), ::emu::to_stream(%s), %s%s)"
               % (name, rel, line_of(text, k), bound, cfg[0], cfg[1], shmem, stream, name,
                  ", " + args if args else ""))
        old = text[k:close + 1]
        rep += "\n" * max(0, old.count("\n") - rep.count("\n"))
        edits.append((k, close + 1, rep))
        pos = close + 1

    # __shared__ declarations
    for m in re.finditer(r"\b__shared__\b", blank):
        end = blank.find(";", m.end())
        if end < 0:
            refuse(m.start(), "a __shared__ declaration without ;")
        ext = re.search(r"\bextern\s+$", blank[:m.start()])
        start = ext.start() if ext else m.start()
        decl = text[m.end():end]
        d = re.fullmatch(r"\s*([A-Za-z_][\w\s:<>,*]*?)\s*\b([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)",
                         decl)
        if not d or "," in d.group(3) or "=" in decl:
            refuse(m.start(), "a __shared__ declaration this rewriting does not know: %r"
                   % text[m.start():end + 1])
        typ, var, dims = d.group(1).strip(), d.group(2), d.group(3).strip()
        if ext:
            if dims != "[]":
                refuse(m.start(), "extern __shared__ that is not an unsized array")
            rep = "%s *const %s = (%s *)::emu::dynamic_shared();" % (typ, var, typ)
        else:
            if not dims and "," in typ:
                refuse(m.start(), "several names in one __shared__ declaration")
            rep = "static %s %s%s; EMU_SHARED_FRESH(%s);" % (typ, var, dims, var)
        edits.append((start, end + 1, rep + "\n" * text[start:end + 1].count("\n")))

    # #pragma unroll
    for m in re.finditer(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[ \t]*(\d*)[^\n]*$", text, re.M):
        edits.append((m.start(), m.end(), "#pragma GCC unroll %s" % (m.group(1) or "16")))

    edits.sort()
    for (s1, e1, _), (s2, _, _) in zip(edits, edits[1:]):
        if s2 < e1:
            refuse(s2, "overlapping rewrites")
    out = text
    for s, e, rep in reversed(edits):
        out = out[:s] + rep + out[e:]
    if out.count("\n") != text.count("\n"):
        raise Refused("%s: the rewriting changed the number of lines" % path)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder of the rewritten files")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for path in args.files:
        path = os.path.abspath(path)
        base, ext = os.path.splitext(os.path.basename(path))
        if ext not in (".cu", ".h"):
            print("transform.py: %s: neither .cu nor .h" % path, file=sys.stderr)
            return 1
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            body = rewrite(path, text)
        except Refused as e:
            print("transform.py: %s" % e, file=sys.stderr)
            return 1
        head = ("/* generated by tests/gpu_emu/transform.py from %s: do not edit */\n"
                '#line 1 "%s"\n' % (path, path))
        tail = ""
        if ext == ".cu" and re.search(r'^\s*#\s*include\s+"(internal|compat)\.h"', text, re.M):
            # the warp width compat.h chose must be the emulation's
            tail = ('\nstatic_assert(SN_WARP == EMU_WARP, "compat.h\'s SN_WARP is not the '
                    'emulated warp width");\n')
        dst = os.path.join(args.out, base + (".cpp" if ext == ".cu" else ".h"))
        with open(dst + ".tmp", "w", encoding="utf-8") as f:
            f.write(head + body + tail)
        os.replace(dst + ".tmp", dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
