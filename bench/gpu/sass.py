#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Disassembles NVIDIA shader cache entries (bench/gpu/shader_cache.sh).

An entry holds one zstd frame per compiled pipeline; each frame holds an
'NVuc' container with the SASS. The code is found by its first
instruction (S2R of SR_TID.X, SR_CTAID.X or SR_CTAID.Y: a heuristic)
and ends at the final branch to itself; nvdisasm -b SM90 decodes it,
and each instruction is printed with its control bits:
  st<stall cycles> w<wait mask, scoreboards 5..0> wb<scoreboard this
  instruction sets> rb<its read scoreboard> | instruction
Loads set a scoreboard (wb); an instruction whose wait mask names it waits
for every load on that scoreboard still in flight.
Usage (here, needs zstd): sass.py ENTRY.bin [ENTRY.bin ...] --nvdisasm PATH [--out DIR]
Writes DIR/<entry>.<n>.sass per pipeline and prints its instruction,
tensor-core and local-memory counts and, after each workgroup barrier, the
first instruction that waits on a scoreboard.
"""
import argparse, os, re, struct, subprocess, tempfile


def codes_of(entry):
    """The code of every compiled pipeline in a cache entry (one zstd frame each)."""
    data = open(entry, 'rb').read()
    starts = [m.start() for m in re.finditer(re.escape(b'\x28\xb5\x2f\xfd'), data)]
    out = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(data)
        r = subprocess.run(['zstd', '-q', '-d', '-c'], input=data[start:end], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        raw = r.stdout
        off = next((o for o in range(0, len(raw) - 16, 4)
                    if (struct.unpack_from('<Q', raw, o)[0] & 0xfff) == 0x919
                    and (struct.unpack_from('<Q', raw, o + 8)[0] >> 8) & 0xff in (0x21, 0x25, 0x26)), None)
        if off is None:
            continue
        for p in range(off, len(raw) - 16, 16):
            lo, hi = struct.unpack_from('<QQ', raw, p)
            if lo & 0xffff == 0x7947 and hi == 0x000fc0000383ffff:  # the final branch to itself
                out.append(raw[off:p + 16])
                break
    return out


def decode(nvdisasm, code):
    with tempfile.NamedTemporaryFile(suffix='.bin') as f:
        f.write(code)
        f.flush()
        text = subprocess.run([nvdisasm, '-b', 'SM90', '-hex', f.name], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout
    rows = []
    for line in text.split('\n'):
        m = re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]{16}) \*/', line)
        if m:
            rows.append([m.group(1), m.group(2).strip(), None])
            continue
        m = re.search(r'/\* (0x[0-9a-f]{16}) \*/', line)
        if m and rows and rows[-1][2] is None:
            rows[-1][2] = int(m.group(1), 16)
    out = []
    for addr, ins, hi in rows:
        if hi is None:
            continue
        c = hi >> 41
        stall, wb, rb, wait = c & 0xf, (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 0x3f
        out.append(f"{addr} st{stall:2d} w{wait:06b} wb{wb if wb != 7 else '-'} rb{rb if rb != 7 else '-'} | {ins}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('entries', nargs='+')
    ap.add_argument('--nvdisasm', required=True)
    ap.add_argument('--out', default='.')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for entry in a.entries:
        for n, code in enumerate(codes_of(entry)):
            lines = decode(a.nvdisasm, code)
            name = os.path.join(a.out, os.path.basename(entry).rsplit('.', 1)[0] + f'.{n}.sass')
            open(name, 'w').write('\n'.join(lines) + '\n')
            hmma = sum('HMMA' in l for l in lines)
            local = [l for l in lines if re.search(r'\b(LDL|STL)\b', l)]
            print(f'{entry}: {len(lines)} instructions, {hmma} HMMA, {len(local)} local-memory -> {name}')
            for i, l in enumerate(lines):
                if 'BAR.SYNC' in l:
                    for k in range(i + 1, min(i + 12, len(lines))):
                        if ' w000000 ' not in lines[k]:
                            print('  after barrier:', lines[k][:96])
                            break


if __name__ == '__main__':
    main()
