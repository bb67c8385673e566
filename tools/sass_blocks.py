"""The basic blocks of the kernels of a disassembly (nvdisasm -c) whose mangled names
match a pattern: each block's instructions counted by opcode, for tools/sass-mix.

  sass_blocks.py FILE.sass PTXAS.log PATTERN MIN

A block starts at a label or after a branch and ends at a branch or before a label; a
block whose branch goes back to an earlier label closes a loop ("loop to"). Blocks of
fewer than MIN instructions are left out of the listing (their counts are in the
kernel's total).
"""
import re
import sys


def registers(log):
    """Mangled kernel name -> registers a thread, from ptxas -v's log."""
    regs, name = {}, None
    for line in open(log):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            name = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            regs[name] = int(m.group(1))
    return regs


def kernels(path, pattern):
    """(name, [(label, [instruction text])]) of each kernel matching pattern."""
    out, cur, blocks = [], None, None
    for line in open(path):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = m.group(1) if re.search(pattern, m.group(1)) else None
            if cur:
                blocks = [("entry", [])]
                out.append((cur, blocks))
            continue
        if not cur:
            continue
        m = re.match(r"^(\.L_x_\d+):", line.strip())
        if m:
            blocks.append((m.group(1), []))
            continue
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if m:
            blocks[-1][1].append(m.group(1))
            if re.search(r"\b(BRA|EXIT|RET|BRX|JMP)\b", m.group(1)):
                blocks.append((blocks[-1][0] + "+", []))
    return out


def opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]


def main():
    path, log, pattern, least = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    regs = registers(log)
    found = kernels(path, pattern)
    if not found:
        sys.exit("sass-mix: no kernel matches '%s'" % pattern)
    for name, blocks in found:
        total = sum(len(b) for _, b in blocks)
        print("%s: %d instructions, %s registers" % (name, total, regs.get(name, "?")))
        seen = {}
        for label, body in blocks:
            seen[label] = True
            if len(body) < least:
                continue
            ops = {}
            for ins in body:
                op = opcode(ins)
                ops[op] = ops.get(op, 0) + 1
            mma = ops.get("HMMA", 0)
            m = re.search(r"BRA `\((\.L_x_\d+)\)", body[-1])
            back = " loop to %s" % m.group(1) if m and m.group(1) in seen else ""
            per = " (%.2f an HMMA)" % (len(body) / mma) if mma else ""
            mix = " ".join("%s %d" % kv for kv in sorted(ops.items(), key=lambda kv: -kv[1])[:12])
            print("  %-12s %5d%s%s: %s" % (label, len(body), per, back, mix))


if __name__ == "__main__":
    main()
