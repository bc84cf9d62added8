#!/usr/bin/env python3
# check_md_links.py ROOT — usage: python3 tests/check_md_links.py .   (exit 1 on a broken link)
"""Checks every relative link and image in the repository's .md files: the file exists, and a
#fragment names a heading of the target (GitHub's anchor rule)."""
import os, re, sys, subprocess
root = sys.argv[1]
files = subprocess.run(['git', '-C', root, 'ls-files', '*.md'], capture_output=True, text=True).stdout.split()
files += subprocess.run(['git', '-C', root, 'ls-files', '--others', '--exclude-standard', '*.md'], capture_output=True, text=True).stdout.split()
def anchors(path):
    out, seen = set(), {}
    in_code = False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'): in_code = not in_code; continue
        if in_code: continue
        m = re.match(r'^(#{1,6})\s+(.*)', line)
        if not m: continue
        t = m.group(2).strip().lower()
        t = re.sub(r'[^\w\- ]', '', t).replace(' ', '-')
        n = seen.get(t, 0); seen[t] = n + 1
        out.add(t if n == 0 else f'{t}-{n}')
    return out
bad = 0; count = 0
for f in files:
    p = os.path.join(root, f)
    in_code = False
    for i, line in enumerate(open(p, encoding='utf-8'), 1):
        if line.startswith('```'): in_code = not in_code; continue
        if in_code: continue
        for m in re.finditer(r'!?\[[^\]]*\]\(([^)\s]+)\)', line):
            url = m.group(1)
            if re.match(r'^[a-z]+://', url) or url.startswith('mailto:'): continue
            count += 1
            path, _, frag = url.partition('#')
            tgt = os.path.normpath(os.path.join(os.path.dirname(p), path)) if path else p
            if not os.path.exists(tgt):
                print(f'{f}:{i}: missing {url}'); bad += 1; continue
            if frag and tgt.endswith('.md') and frag not in anchors(tgt):
                print(f'{f}:{i}: no anchor #{frag} in {os.path.relpath(tgt, root)}'); bad += 1
print(f'{count} links checked in {len(files)} files, {bad} broken')
sys.exit(1 if bad else 0)
