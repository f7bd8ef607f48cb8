#!/usr/bin/env python3
"""Count the instructions a warp issues along one path through a kernel's SASS.

  tools/sass_path.py LISTING START STOP [ADDR=t | ADDR=0xTARGET ...] [--break-rule] [--neg-taken=REGEX] [-v]

LISTING is one kernel's `cuobjdump -sass` text (tools/compare_sass.py's way of splitting an object
into kernels, or the object's listing cut at its "Function :" lines). The walk starts at START and
ends on reaching STOP again or for the first time (hex addresses, as the listing prints them).
Unconditional branches are followed; a predicated branch is not taken unless ADDR=t names it; a BRX
needs ADDR=0xTARGET. BSSY, BSYNC, BREAK, BRA.DIV and CALL are counted and stepped over (a warp that
does not diverge). Predicated-off instructions count: they are issued.

  --break-rule       a predicated BRA right after a BREAK on the same predicate is taken when the
                     predicate is @P and not when @!P (the shape nvcc gives an `if` that leaves a
                     nested region early: the common case of checks such as "input is normal")
  --neg-taken=REGEX  an @!Px BRA whose Px was last set by an ISETP/FSETP matching REGEX is taken
                     (for example a token-count check: --neg-taken='ISETP.GE.AND P., PT, R[0-9]+, 0x3, PT')
  -v                 print each predicated branch met and the way it went

Prints the count and the opcodes' histogram. docs/performance.md ("Route llamacpp on the H200",
attempt 4) counts the generic kernel's BF16 groups with it.
"""
import collections
import re
import sys


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    verbose = len(args) != len(sys.argv) - 1
    listing, start, stop = args[0], int(args[1], 16), int(args[2], 16)
    decisions, neg_taken, break_rule = {}, [], False
    for a in args[3:]:
        if a == "--break-rule":
            break_rule = True
        elif a.startswith("--neg-taken="):
            neg_taken.append(re.compile(a.split("=", 1)[1]))
        else:
            k, v = a.split("=")
            decisions[int(k, 16)] = v
    ins, order = {}, []
    for line in open(listing):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*?);", line)
        if m:
            a = int(m.group(1), 16)
            ins[a] = ((m.group(2) or "").strip(), m.group(3), m.group(4))
            order.append(a)
    nxt = dict(zip(order, order[1:]))
    prev = {b: a for a, b in nxt.items()}
    a, n, ops, setter = start, 0, collections.Counter(), {}
    while not (a == stop and n > 0):
        pred, op, rest = ins[a]
        n += 1
        ops[op.split(".")[0]] += 1
        if n > 1_000_000:
            sys.exit("no end after a million instructions: a loop without a decision?")
        if op.startswith(("ISETP", "FSETP")):
            pm = re.match(r"\s*(P\d)", rest)
            if pm:
                setter[pm.group(1)] = op + rest
        if op == "EXIT" and not pred:
            print("EXIT reached")
            break
        if op.startswith("BRX"):
            a = int(decisions[a], 16)
            continue
        if op.startswith("BRA") and not op.startswith("BRA.DIV"):
            target = int(re.search(r"0x([0-9a-f]+)", rest).group(1), 16)
            taken = not pred or decisions.get(a) == "t"
            if pred and a not in decisions:
                p_pred, p_op, _ = ins[prev[a]] if a in prev else ("", "", "")
                if break_rule and p_op.startswith("BREAK") and p_pred == pred:
                    taken = not pred.startswith("@!")
                pm = re.match(r"@!(P\d)", pred)
                if pm and any(r.search(setter.get(pm.group(1), "")) for r in neg_taken):
                    taken = True
            if pred and verbose:
                print(f"  {a:#x} {pred} {op} {rest.strip()} -> {'taken' if taken else 'not taken'}")
            if taken:
                a = target
                continue
        a = nxt[a]
    print("instructions", n)
    print(" ".join(f"{k}:{v}" for k, v in ops.most_common()))


if __name__ == "__main__":
    main()
