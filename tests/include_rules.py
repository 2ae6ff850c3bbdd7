#!/usr/bin/env python3
"""The tree's include rules, checked (meson test include_rules).

Each folder of C sources may include headers of the folders its row of
RULES names, and nothing else; docs/architecture.md draws the same
picture.  A quoted include is resolved by name against the folders, and
followed: a header a folder may include must not itself bring in what the
folder may not (the collector reaching protobuf-c through frame.h is as
wrong as including it).  Angle includes of the libraries a folder must not
use (libuv, protobuf-c, libmicrohttpd, libsystemd) are refused the same
way.  No file anywhere includes a "../" path: the build names the
folders.

Prints one line per violation, then a count; exits 1 if there was any.
"""
import os
import re
import sys

ROOT = os.environ.get("HEAPD_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))

# Generated at build time, resolved to the folder whose meson.build makes
# them.
GENERATED = {"heapd.pb-c.h": "proto", "heapd_build.h": "."}

LOOP_LIBS = ("uv.h", "uv/", "protobuf-c/", "microhttpd.h", "systemd/")
PROTO_LIBS = ("protobuf-c/",)

# folder: (headers it may include, as "folder/" or "folder/file.h";
#          angle-include prefixes it may not use)
RULES = {
    # the contract: its own headers and the generated messages only
    "proto": (["proto/"], ()),
    # the collector: its own headers, the shared-memory contract and the
    # parsed config; no socket, no event loop, no wire messages
    "daemon/gc": (["daemon/gc/", "daemon/config.h", "proto/layout.h",
                   "proto/young.h", "proto/futex.h", "proto/lock.h",
                   "proto/clock.h",
                   "proto/heapd_counters.h", "proto/heapd_errors.h",
                   "proto/heapd_object.h",
                   # the saved-heap file, which the saver and the loader
                   # write and read (no socket in it)
                   "proto/savefile.h"],
                  LOOP_LIBS),
    # the loop side: everything of the daemon and the contract
    "daemon": (["daemon/", "daemon/gc/", "proto/", "./heapd_build.h"], ()),
    # the runtime: itself and the contract, never the daemon
    "client": (["client/", "proto/", "./heapd_build.h"], ()),
    # the collections: the public header, the runtime's interface for
    # them, and the layout and futex words of the contract
    "client/collections": (["client/collections/", "client/heapd.h",
                            "client/runtime.h", "proto/layout.h",
                            "proto/collections.h",
                            "proto/futex.h", "proto/clock.h",
                            "proto/heapd_counters.h",
                            "proto/heapd_errors.h", "proto/heapd_object.h"],
                           LOOP_LIBS),
    # heapctl: a client of the public API, plus the Prometheus writer
    "heapctl": (["heapctl/", "client/heapd.h", "proto/heapd_counters.h",
                 "proto/heapd_errors.h", "proto/heapd_object.h",
                 "proto/metrics.h",
                 "proto/clock.h"],
                LOOP_LIBS),
    # the examples: what an application has
    "examples": (["client/heapd.h", "client/collections/heapd_collections.h",
                  "proto/heapd_counters.h", "proto/heapd_errors.h",
                  "proto/heapd_object.h"],
                 LOOP_LIBS),
}

# Folders whose every file (subfolders too) is checked for "../".
ANYWHERE = ["client", "daemon", "proto", "heapctl", "tests", "bench",
            "fuzz", "examples"]

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def sources(folder):
    """The .c and .h files directly in FOLDER (relative to ROOT)."""
    d = os.path.join(ROOT, folder)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(d)
                  if f.endswith((".c", ".h")))


def sources_below(folder):
    """The .c and .h files in FOLDER and its subfolders."""
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, folder)):
        rel = os.path.relpath(d, ROOT)
        out += [os.path.join(rel, f) for f in sorted(files)
                if f.endswith((".c", ".h"))]
    return out


def includes(path):
    out = []
    with open(os.path.join(ROOT, path), encoding="utf-8",
              errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                out.append((n, m.group(1), m.group(2)))
    return out


# every header of the tree by name: name -> ["folder/name", ...] (two
# folders may have a header of the same name: client/remark.h and
# daemon/gc/remark.h)
HEADERS = {}
for folder in sorted(set(RULES) | set(ANYWHERE)):
    for p in sources(folder):
        if p.endswith(".h"):
            HEADERS.setdefault(os.path.basename(p), []).append(p)
for name, folder in GENERATED.items():
    HEADERS.setdefault(name, []).append(folder + "/" + name)


def resolve(name, including, rule):
    """The header NAME included from INCLUDING means: the one beside it,
    else one RULE allows, else any (a violation), else None."""
    found = HEADERS.get(os.path.basename(name), [])
    for h in found:
        if os.path.dirname(h) == os.path.dirname(including):
            return h
    for h in found:
        if allowed(rule, h):
            return h
    return found[0] if found else None


def allowed(rule, header):
    return any(header == a or (a.endswith("/") and
                               os.path.dirname(header) + "/" == a)
               for a in rule)


def main():
    bad = []
    checked = 0
    for folder in sorted(set(RULES) | set(ANYWHERE)):
        if not (sources(folder) if folder in RULES else sources_below(folder)):
            bad.append(f"{folder}/: no C sources there; a folder renamed "
                       "or moved needs its row here renamed too")
    for folder in ANYWHERE:
        for p in sources_below(folder):
            for n, kind, name in includes(p):
                checked += 1
                if kind == '"' and ".." in name.split("/"):
                    bad.append(f"{p}:{n}: includes \"{name}\": a relative "
                               "path; name the header, the build names its "
                               "folder")
    for folder, (rule, refused_libs) in RULES.items():
        for p in sources(folder):
            # follow quoted includes from P through the headers it reaches
            seen = set()
            todo = [(p, None)]
            while todo:
                cur, via = todo.pop()
                if cur in seen or cur.startswith("./") and cur != p:
                    continue
                seen.add(cur)
                if not os.path.exists(os.path.join(ROOT, cur)):
                    continue  # generated: checked by name only
                for n, kind, name in includes(cur):
                    checked += 1
                    where = f"{cur}:{n}" + (f" (reached from {p})"
                                            if cur != p else "")
                    if kind == "<":
                        if any(name.startswith(lib) for lib in refused_libs):
                            bad.append(f"{where}: <{name}>: {folder}/ may "
                                       "not use this library")
                        continue
                    header = resolve(name, cur, rule)
                    if header is None:
                        bad.append(f"{where}: \"{name}\" is no header of "
                                   "the tree")
                        continue
                    if not allowed(rule, header):
                        bad.append(f"{where}: \"{name}\" is {header}, "
                                   f"which {folder}/ may not include")
                        continue
                    todo.append((header, cur))
                    if header == "proto/heapd.pb-c.h":
                        # the generated messages need protobuf-c
                        if any(l in refused_libs for l in PROTO_LIBS):
                            bad.append(f"{where}: \"{name}\": {folder}/ may "
                                       "not use protobuf-c")
    for line in bad:
        print(line)
    print(f"include_rules: {checked} includes checked, {len(bad)} "
          "violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
