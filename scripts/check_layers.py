#!/usr/bin/env python3
"""Checks that the code's layering points down only, as docs/architecture.md's "Layers" table says.

`scripts/check_layers.py [ROOT] [--stamp FILE]` (the build runs it with --stamp on every
build, so an upward include fails the build; the `layers` test runs it too) reads the table from ROOT/docs/architecture.md (one row per folder: its
level, its public headers under include/tessera/) and every #include in the folders' sources
and in include/tessera/. It fails, naming file and line, when
  - a folder or public header includes a public header of its own level or above (another
    folder's), or a header the table does not place;
  - a folder includes another folder's private header ("io/utf8.h" outside io/);
  - examples/ includes anything but public headers;
  - Tensor's methods are defined outside autograd/, or TensorBase's outside core/;
  - an arrow in FORBIDDEN is drawn (downward, but not wanted: engine -> models).
Arrows that exist today and are to be removed (issue 14) are listed in KNOWN with the reason;
one that no longer occurs must be taken off the list, so the list only shrinks.
Written here because no packaged tool checks include layering against a table of our own.
"""
import os
import re
import sys

TABLE = "docs/architecture.md"  # the Layers table the check reads

KNOWN = {}

# Arrows that point down but are still not wanted: (from folder, to folder) -> why.
FORBIDDEN = {
    ("engine", "models"): "the engine knows models only through the loss-model interface",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TENSOR_METHOD = re.compile(r"^(?:[\w:<>&*]+\s+)+(Tensor|TensorBase)::(\w+)\(")
# Where each tensor class's methods are defined: TensorBase (storage, geometry, views that
# record nothing) in core, Tensor (what records the graph) in autograd.
METHOD_HOME = {"TensorBase": "core", "Tensor": "autograd"}
SOURCE = re.compile(r"\.(cpp|h|cu|cuh)$")


def read_table(root):
    """{folder: level}, {public header or header folder: folder} from the Layers table."""
    lines = open(os.path.join(root, TABLE), encoding="utf-8").read().splitlines()
    try:
        start = lines.index("## Layers")
    except ValueError:
        sys.exit(f"check_layers: {TABLE} has no '## Layers' section")
    levels, owner = {}, {}
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or not cells[0].isdigit():
            continue
        folder = cells[1].strip("`").rstrip("/")
        levels[folder] = int(cells[0])
        for h in re.findall(r"`([^`]+)`", cells[2]):
            owner[h.rstrip("/")] = folder
    if not levels:
        sys.exit(f"check_layers: {TABLE}'s Layers table has no rows")
    return levels, owner


def sources(root, folder):
    for dirpath, _, files in os.walk(os.path.join(root, folder)):
        for f in sorted(files):
            if SOURCE.search(f):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def public_owner(header, owner):
    """The folder whose public header this is ("tessera/io/files.h" -> "io"), or None."""
    rel = header[len("tessera/"):]
    sub = rel.split("/")[0]
    return owner.get(sub) if "/" in rel else owner.get(rel)


def check(root):
    levels, owner = read_table(root)
    problems, seen_known = [], set()

    def allowed(path, what):
        if (path, what) in KNOWN:
            seen_known.add((path, what))
            return True
        return False

    def check_include(path, number, header, folder):
        here = f"{path}:{number}"
        if header.startswith("tessera/"):
            to = public_owner(header, owner)
            if to is None:
                problems.append(f"{here}: {header} is not in {TABLE}'s Layers table")
            elif to != folder and levels[to] >= levels[folder] and not allowed(path, header):
                problems.append(f"{here}: {folder}/ (level {levels[folder]}) includes {header} "
                                f"of {to}/ (level {levels[to]}): arrows point down only")
            elif (folder, to) in FORBIDDEN and not allowed(path, header):
                problems.append(f"{here}: {folder}/ includes {header}: "
                                f"{FORBIDDEN[(folder, to)]}")
        elif "/" in header:
            # Relative to the including file (how the build finds private headers), else to
            # the root: either way the folder the header lives in.
            beside = os.path.normpath(os.path.join(os.path.dirname(path), header))
            resolved = beside if os.path.exists(os.path.join(root, beside)) else header
            to = resolved.split(os.sep)[0]
            if to in levels and to != folder and not allowed(path, header):
                problems.append(f"{here}: {folder}/ includes {header}, a private header of "
                                f"{to}/; only include/tessera/ is shared")

    for folder in levels:
        if not os.path.isdir(os.path.join(root, folder)):
            continue
        for path in sources(root, folder):
            for number, header in includes(root, path):
                check_include(path, number, header, folder)
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                methods = [(n, m.group(1), m.group(2)) for n, l in enumerate(f, 1)
                           if (m := TENSOR_METHOD.match(l)) and METHOD_HOME[m.group(1)] != folder]
            if methods and not allowed(path, methods[0][1] + "::"):
                n, cls, name = methods[0]
                problems.append(f"{path}:{n}: {cls}::{name} is defined in {folder}/; "
                                f"{cls}'s methods belong to {METHOD_HOME[cls]}/")
    for path in sources(root, "include/tessera"):
        header = path[len("include/"):]
        folder = public_owner(header, owner)
        if folder is None:
            problems.append(f"{path}: not in {TABLE}'s Layers table")
            continue
        for number, inc in includes(root, path):
            check_include(path, number, inc, folder)
    for path in sources(root, "examples"):
        for number, header in includes(root, path):
            if not header.startswith("tessera/"):
                problems.append(f"{path}:{number}: examples use public headers only, "
                                f"found {header}")
    for path, what in sorted(set(KNOWN) - seen_known):
        problems.append(f"{path}: no longer has the known arrow to {what}: take it off KNOWN "
                        f"in scripts/check_layers.py")
    return problems, len(seen_known)


def main():
    args = sys.argv[1:]
    stamp = None
    if len(args) >= 2 and args[-2] == "--stamp":  # the build's step: touch a file on success
        stamp = args[-1]
        args = args[:-2]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    problems, known = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)")
        return 1
    if stamp:
        with open(stamp, "w") as f:
            f.write("ok\n")
        return 0
    print(f"check_layers: ok ({known} known arrows left to remove, see scripts/check_layers.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
