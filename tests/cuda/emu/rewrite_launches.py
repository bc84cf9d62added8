#!/usr/bin/env python3
"""rewrite_launches.py SRC DST — copy a CUDA source for the CPU emulator (tests/cuda/emu), turning
every launch  kernel<T, D><<<grid, block, smem, stream>>>(args)  into
fg_emu_kernel_call(grid, block, smem, stream, kernel<T, D>, args)  (cuda_runtime.h of the
emulator). Launches must give all four <<<>>> parameters and at least one argument (all of
flashgrad's do); anything else is left alone and then fails to compile, loudly."""
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[^<>;()]*>)?)<<<(.*?)>>>\(", re.S)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src).read()
    out = LAUNCH.sub(lambda m: "fg_emu_kernel_call(%s, %s, " % (m.group(2), m.group(1)), text)
    with open(dst, "w") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(out)


if __name__ == "__main__":
    main()
