#!/usr/bin/python3
"""rooms_check.py — the direction of node/'s rooms (node/README.md), as a test.

node/ is five rooms, lowest first: base, runtime, pool, daemon, cmd. A file of
one room may include its own room's headers and the public headers of the
rooms below it; never a header of a room above it, and never another room's
private header (*_internal.h). The project's lower layers (kernels/, model/,
keys/, mesh/, scheduler/) include nothing of node/. Every source of node/
lives in a room.

    rooms_check.py [SOURCE_DIR]     (default: the folder above tests/)

Prints one line per violation, naming the file, the header and the rule, and
exits 1 when there is any; 0 otherwise. ctest runs it as unit.rooms.
"""
import os
import re
import sys

ROOMS = ["base", "runtime", "pool", "daemon", "cmd"]  # lowest first
LOWER_LAYERS = ["kernels", "model", "keys", "mesh", "scheduler"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = (".c", ".h")


def sources(folder):
    for dirpath, _dirs, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith(SOURCE):
                yield os.path.join(dirpath, f)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    # Includes inside comments do not count.
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return INCLUDE.findall(text)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    node = os.path.join(root, "node")
    problems = []

    # Which room each header of node/ lives in.
    room_of = {}
    for room in ROOMS:
        folder = os.path.join(node, room)
        if not os.path.isdir(folder):
            problems.append(f"node/{room}/: the room is missing")
            continue
        for path in sources(folder):
            name = os.path.basename(path)
            if name.endswith(".h"):
                if name in room_of:
                    problems.append(f"node/{room}/{name}: a header of that name is also in "
                                    f"node/{room_of[name]}/ (an include could mean either)")
                room_of[name] = room

    # Nothing outside the rooms.
    for entry in sorted(os.listdir(node)):
        full = os.path.join(node, entry)
        if os.path.isdir(full) and entry not in ROOMS:
            problems.append(f"node/{entry}/: not a room ({', '.join(ROOMS)})")
        elif os.path.isfile(full) and entry.endswith(SOURCE):
            problems.append(f"node/{entry}: not in a room; move it into one of node/"
                            f"{{{','.join(ROOMS)}}}/")

    for room in ROOMS:
        rank = ROOMS.index(room)
        for path in sources(os.path.join(node, room)):
            rel = os.path.relpath(path, root)
            for header in includes(path):
                name = os.path.basename(header)
                if name not in room_of:
                    continue  # a lower layer's or a system header
                other = room_of[name]
                if ROOMS.index(other) > rank:
                    problems.append(f"{rel}: includes {header}, a header of node/{other}/, a room "
                                    f"above node/{room}/ (allowed: {' -> '.join(reversed(ROOMS))})")
                elif other != room and name.endswith("_internal.h"):
                    problems.append(f"{rel}: includes {header}, private to node/{other}/")

    for layer in LOWER_LAYERS:
        for path in sources(os.path.join(root, layer)):
            rel = os.path.relpath(path, root)
            for header in includes(path):
                name = os.path.basename(header)
                if name in room_of:
                    problems.append(f"{rel}: includes {header} of node/{room_of[name]}/; "
                                    f"{layer}/ is below node/ and includes nothing of it")

    for p in problems:
        print(p)
    if problems:
        print(f"rooms: {len(problems)} violation(s) of node/README.md, \"Rooms\"")
        return 1
    print(f"rooms: {len(room_of)} headers in {len(ROOMS)} rooms, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
