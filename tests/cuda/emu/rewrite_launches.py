#!/usr/bin/env python3
"""rewrite_launches.py SRC DST — copy a CUDA source for the CPU emulator (tests/cuda/emu), turning
every launch  kernel<T, D><<<grid, block, smem, stream>>>(args)  into
fg_emu_kernel_call(grid, block, smem, stream, kernel<T, D>, args)  (cuda_runtime.h of the
emulator). Launches must give all four <<<>>> parameters and at least one argument (all of
flashgrad's do); anything else is left alone and then fails to compile, loudly."""
import re
import sys

# the kernel, then optional white space (a formatter may break the line before <<<), the launch
# parameters, and the opening of the argument list
LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[^<>;()]*>)?)(\s*)<<<(.*?)>>>\(", re.S)


def call(m):
    # the line breaks the white space held go after the call's opening, so line numbers stay
    return "fg_emu_kernel_call(%s, %s, %s" % (m.group(3), m.group(1), "\n" * m.group(2).count("\n"))


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src).read()
    out = LAUNCH.sub(call, text)
    with open(dst, "w") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(out)


if __name__ == "__main__":
    main()
