#!/bin/sh
# made_on.sh — one line naming this machine and today's date, for the .made file beside a benchmark's
# CSV (bench/plots.gp puts it in the plot's title): "<cpu model>, <n> cpus[, virtual machine], <date>".
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
n=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')
vm=$(grep -qw hypervisor /proc/cpuinfo 2>/dev/null && echo ', virtual machine')
echo "${cpu:-unknown cpu}, $n cpus$vm, $(date -u +%Y-%m-%d)${1:+, $1}"
