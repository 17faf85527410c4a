#!/usr/bin/env python3
"""Kernels whose compiled code touches global memory before their PDL wait more than their PTX does.

A kernel launched with launch_pdl (src/kernels/common/pdl.cuh) may run while the kernel before it
still writes; it must read what that kernel writes only after pdl_wait (griddepcontrol.wait, ACQBULK
in SASS). In PTX the wait orders the loads, but ptxas may move ld.global.nc loads (const __restrict__
inputs) above it: it did in the prompt RMSNorm of wip/rmsnorm-w, whose f16/bf16 instances then read
residuals still being written (docs/architecture.md). This script compiles each CUDA source that waits
to PTX with the build's own flags, disassembles the build's object for the same source, and, kernel by
kernel, compares the global memory operations before the wait: a kernel with more of them in SASS than
in PTX is listed (its loads were hoisted). Exit status 1 when one is.

  scripts/pdl-audit.py [--build build] [--jobs N] [src/kernels/ops/norm_rope.cu ...]

Needs nvcc, and cuobjdump with nvdisasm: on PATH, in the CUDA toolkit's bin folder, or fetched from
PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into ~/.cache/lamina/cuda-tools with --install.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(os.path.expanduser("~"), ".cache", "lamina", "cuda-tools")
TOOLS_BIN = os.path.join(TOOLS, "nvidia", "cu13", "bin")
# How each listing names a kernel, marks the wait, and spells a global memory operation.
PTX = (re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+(\S+?)\("), "griddepcontrol.wait",
       re.compile(r"^\s*(@!?%p\d+\s+)?(ld|st|atom|red)\.global\b"))
SASS = (re.compile(r"Function : (\S+)"), "ACQBULK", re.compile(r"\b(LDG|STG|ATOMG|REDG|RED)\b"))


def prewait(text, listing):
    """{kernel: global memory operations before its first wait} for the kernels of a PTX or SASS
    listing that wait."""
    entry, wait, mem = listing
    out, fn, n = {}, None, 0
    for line in text.splitlines():
        m = entry.search(line)
        if m:
            fn, n = m.group(1), 0
            continue
        if fn is None or fn in out:
            continue
        if wait in line:
            out[fn] = n
        elif mem.search(line):
            n += 1
    return out


def tool(name):
    path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(["/usr/local/cuda/bin", TOOLS_BIN]))
    if not path:
        sys.exit(f"pdl-audit: no {name} on PATH, in /usr/local/cuda/bin or {TOOLS_BIN} (run with --install)")
    return path


def install_tools():
    """cuobjdump and nvdisasm from PyPI into TOOLS (the venv's pip where scripts/deps.sh made one),
    unless both are there already."""
    where = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/cuda/bin", TOOLS_BIN])
    if shutil.which("cuobjdump", path=where) and shutil.which("nvdisasm", path=where):
        return
    venv_pip = os.path.join(os.path.expanduser("~"), ".cache", "lamina", "venv", "bin", "pip")
    pip = [venv_pip] if os.path.exists(venv_pip) else [sys.executable, "-m", "pip"]
    r = subprocess.run(pip + ["install", "-q", "--disable-pip-version-check", "--target", TOOLS,
                              "nvidia-cuda-cuobjdump>=13,<14", "nvidia-cuda-nvdisasm>=13,<14"])
    if r.returncode:
        sys.exit("pdl-audit: pip could not install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm")


def ptx_command(entry, ptx_path):
    args, out, skip = shlex.split(entry["command"]), [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a.startswith("--generate-code") or a.startswith("-gencode"):
            continue
        out.append(a)
    return out + ["-arch=sm_90a", "-ptx", "-o", ptx_path]


def object_of(entry):
    args = shlex.split(entry["command"])
    o = args[args.index("-o") + 1]
    return o if os.path.isabs(o) else os.path.join(entry["directory"], o)


def audit(entry, tmp, cuobjdump):
    src = os.path.relpath(entry["file"], ROOT)
    ptx = os.path.join(tmp, src.replace("/", "_") + ".ptx")
    r = subprocess.run(ptx_command(entry, ptx), cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode:
        return src, None, f"nvcc -ptx failed: {r.stderr[-300:]}"
    s = subprocess.run([cuobjdump, "-sass", object_of(entry)], capture_output=True, text=True)
    if s.returncode:
        return src, None, f"cuobjdump failed: {s.stderr[-300:]}"
    before_ptx, before_sass = prewait(open(ptx).read(), PTX), prewait(s.stdout, SASS)
    hoisted = [(k, n, before_ptx[k]) for k, n in before_sass.items() if k in before_ptx and n > before_ptx[k]]
    unmatched = [k for k in before_sass if k not in before_ptx]
    return src, (len(before_sass), hoisted, unmatched), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--install", action="store_true", help=f"fetch cuobjdump and nvdisasm from PyPI into {TOOLS}")
    ap.add_argument("sources", nargs="*",
                    help="CUDA sources (default: every one under src/ that waits, directly or through a header; "
                         "tools/chain_ceiling.cu's streaming kernels read before their wait what no kernel writes)")
    a = ap.parse_args()
    if a.install:
        install_tools()
    cuobjdump = tool("cuobjdump")
    # cuobjdump -sass runs nvdisasm from PATH
    os.environ["PATH"] = os.path.dirname(tool("nvdisasm")) + os.pathsep + os.environ.get("PATH", "")
    db = os.path.join(a.build, "compile_commands.json")
    if not os.path.exists(db):
        sys.exit(f"pdl-audit: no {db} (configure with CMAKE_EXPORT_COMPILE_COMMANDS, as scripts/build.sh does)")
    entries = [e for e in json.load(open(db)) if e["file"].endswith(".cu")]
    if a.sources:
        want = {os.path.realpath(os.path.join(ROOT, s)) for s in a.sources}
        entries = [e for e in entries if os.path.realpath(e["file"]) in want]
    else:
        waits = re.compile(r"pdl_wait\(\)|pdl_enter\(\)")
        headers = {os.path.basename(p) for p in subprocess.run(
            ["git", "-C", ROOT, "grep", "-l", "-E", r"pdl_wait\(\)|pdl_enter\(\)", "--", "*.cuh"],
            capture_output=True, text=True).stdout.split()}
        src_dir = os.path.join(os.path.realpath(ROOT), "src") + os.sep
        entries = [e for e in entries if os.path.realpath(e["file"]).startswith(src_dir) and
                   (waits.search(open(e["file"]).read()) or any(h in open(e["file"]).read() for h in headers))]
    if not entries:
        sys.exit("pdl-audit: no CUDA source to audit")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp, cf.ThreadPoolExecutor(a.jobs) as ex:
        for src, res, err in ex.map(lambda e: audit(e, tmp, cuobjdump), entries):
            if err:
                print(f"{src}: {err}")
                bad += 1
                continue
            n, hoisted, unmatched = res
            print(f"{src}: {n} kernels that wait, {len(hoisted)} with loads moved above the wait"
                  + (f", {len(unmatched)} without a PTX match" if unmatched else ""))
            for k, s, p in hoisted:
                print(f"  {k}: {s} global memory operations before ACQBULK, {p} before griddepcontrol.wait in PTX")
            bad += len(hoisted)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
