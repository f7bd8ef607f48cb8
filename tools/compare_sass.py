#!/usr/bin/env python3
"""Per-kernel SASS comparison of two builds of the CUDA objects.

  tools/compare_sass.py BASE_DIR NEW_DIR

Each DIR is a build's object folder (for example build/gpu/CMakeFiles/lmhead_core.dir/src/cuda).
Runs `cuobjdump -sass` on every *.cu.o of both and prints, per object, the kernels whose machine
code is identical, changed, removed or added. A host-only refactor must show no changed kernel;
a kernel configuration taken out of the library shows as removed. Exit status 1 when any kernel
changed. Kernels in an anonymous namespace carry a hash of their file in the mangled name, which
any edit of the file changes: it is taken out before names are matched, and the listings are
compared without their encodings and spacing.
"""
import os
import re
import subprocess
import sys


def kernels(obj):
    text = subprocess.run(["cuobjdump", "-sass", obj], capture_output=True, text=True, check=True).stdout
    out, name, body = {}, None, []
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                out[name] = "\n".join(body)
            # _GLOBAL__N__<hash>_<len><file>_<hash><len>NAME -> _GLOBAL__N_1<len>NAME
            name, body = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+\w+?_[0-9a-f]{8}(?=\d)", "_GLOBAL__N_1", m.group(1)), []
        elif name is not None and line.strip().startswith("Fatbin"):  # the next section: no kernel's code
            out[name] = "\n".join(body)
            name, body = None, []
        elif name is not None:
            code = re.sub(r"/\* 0x[0-9a-f]+ \*/", "", line).split()
            if code:
                body.append(" ".join(code))
    if name:
        out[name] = "\n".join(body)
    return out


def main():
    base_dir, new_dir = sys.argv[1], sys.argv[2]
    names = sorted({f for d in (base_dir, new_dir) for f in os.listdir(d) if f.endswith(".cu.o")})
    changed_any = False
    for f in names:
        b = kernels(os.path.join(base_dir, f)) if os.path.exists(os.path.join(base_dir, f)) else {}
        n = kernels(os.path.join(new_dir, f)) if os.path.exists(os.path.join(new_dir, f)) else {}
        same = [k for k in b if k in n and b[k] == n[k]]
        changed = [k for k in b if k in n and b[k] != n[k]]
        print(f"{f}: {len(same)} identical, {len(changed)} changed, {len(set(b) - set(n))} removed, "
              f"{len(set(n) - set(b))} added")
        for k in changed:
            print("  changed", k)
        for k in sorted(set(b) - set(n)):
            print("  removed", k)
        for k in sorted(set(n) - set(b)):
            print("  added", k)
        changed_any |= bool(changed)
    return 1 if changed_any else 0


if __name__ == "__main__":
    sys.exit(main())
