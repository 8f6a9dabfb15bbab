#!/usr/bin/env python3
"""Writes DIR/.toprc (procps top 4.0.2's format) showing top's default fields plus issue 17's
new ones (nsIPC, nsNET, CGROUPS, OOMs, OOMa, SUPGIDS, EXE), for measuring `top -b -n 1` with
them on: `HOME=DIR top -b -n 1 -w 512` and `HOME=DIR taskdiag top -b -n 1 -w 512`
(docs/BENCHMARKS.md). Usage: scripts/bench-top-toprc.py DIR [FIELD,FIELD,...] (another set of
shown fields, in order)."""
import os
import subprocess
import sys

SHOWN = ["PID", "USER", "PR", "NI", "VIRT", "RES", "SHR", "S", "%CPU", "%MEM", "TIME+",
         "nsIPC", "nsNET", "CGROUPS", "OOMs", "OOMa", "SUPGIDS", "EXE", "COMMAND"]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: bench-top-toprc.py DIR [FIELD,FIELD,...]")
    home = sys.argv[1]
    shown = sys.argv[2].split(",") if len(sys.argv) == 3 else SHOWN
    names = subprocess.run(["top", "-O"], capture_output=True, text=True,
                           check=True).stdout.split()
    idx = {n: i for i, n in enumerate(names)}
    order = [idx[n] for n in shown] + [i for i in range(len(names)) if names[i] not in shown]
    # fieldscur: (field + '%') << 1, | 1 when shown; 100 values, the unused ones last.
    vals = [((i + 37) << 1) | (names[i] in shown) for i in order]
    vals += [(i + 37) << 1 for i in range(len(names), 100)]
    fc = ""
    for j, v in enumerate(vals):
        if j and j % 20 == 0:
            fc += "\n\t\t  "
        fc += f"{v:4} "
    rc = ("top's Config File (Linux processes with windows)\n"
          "Id:k, Mode_altscr=0, Mode_irixps=1, Delay_time=3.0, Curwin=0\n")
    for w, sort in [("Def", idx["%CPU"]), ("Job", 0), ("Mem", 21), ("Usr", 3)]:
        rc += (f"{w}\tfieldscur={fc}\n\twinflags=193844, sortindx={sort}, maxtasks=0, "
               "graph_cpus=0, graph_mems=0, double_up=0, combine_cpus=0, core_types=0\n"
               "\tsummclr=1, msgsclr=1, headclr=3, taskclr=1\n")
    rc += "Fixed_widest=0, Summ_mscale=1, Task_mscale=0, Zero_suppress=0, Tics_scaled=0\n"
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, ".toprc"), "w") as f:
        f.write(rc)


if __name__ == "__main__":
    main()
