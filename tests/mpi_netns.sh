#!/bin/sh
# mpi_netns.sh BIN DIR — two "hosts" on this machine: network namespaces joined by a veth pair,
# one MPI rank in each, Open MPI's TCP transport (and its launch channel) pinned to that link. A
# 2-rank run must equal one process with --grad-accum 2 bit for bit (cmp of the checkpoint).
# (LeakSanitizer is off for the ranks under make sanitize: Open MPI leaves its own allocations at exit.)
# Exit 0 pass, 1 fail, 77 skip (a line says why: not root, no `ip netns`, no unshare, ...).
# mpirun reaches the second "host" through a launch agent (what ssh is between real hosts) that
# enters its namespace, with a hostname of its own (a UTS namespace) so that Open MPI sees two nodes.
BIN=$1 DIR=$2
skip() { echo "skip: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no unshare (util-linux)"
command -v mpirun >/dev/null 2>&1 || skip "no mpirun"
A=fgA$$ B=fgB$$ VA=fgva$$ VB=fgvb$$ NET=10.213.$(($$ % 250)).
cleanup() { ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$A" 2>/dev/null || skip "cannot create a network namespace (ip netns add)"
ip netns add "$B" 2>/dev/null || skip "cannot create a second network namespace"
ip link add "$VA" type veth peer name "$VB" 2>/dev/null || skip "cannot create a veth pair"
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" &&
    ip -n "$A" addr add "${NET}1/24" dev "$VA" && ip -n "$B" addr add "${NET}2/24" dev "$VB" &&
    ip -n "$A" link set "$VA" up && ip -n "$B" link set "$VB" up &&
    ip -n "$A" link set lo up && ip -n "$B" link set lo up || skip "cannot configure the veth pair"
cat >"$DIR/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in ${NET}2) exec ip netns exec $B unshare --uts sh -c "hostname fg-host-b; \$*" ;; esac
exec sh -c "\$*"
AGENT
chmod +x "$DIR/agent.sh"
cd "$DIR" || exit 1
ARGS="--data text.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --eval-every 0 \
--eval-iters 2 --samples 0 --threads 1 --dropout 0.1 --warmup 0 --lr 0.01 --steps 3"
"$BIN" train $ARGS --grad-accum 2 --out one >one.log 2>&1 || { echo "one process failed:"; cat one.log; exit 1; }
TMPDIR="$DIR" ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 ip netns exec "$A" unshare --uts sh -c \
    "hostname fg-host-a; mpirun --host ${NET}1,${NET}2 -np 2 --mca plm_rsh_agent $DIR/agent.sh \
     --mca btl self,tcp --mca btl_tcp_if_include ${NET}0/24 --mca oob_tcp_if_include ${NET}0/24 \
     $BIN train $ARGS --grad-accum 1 --out two" >two.log 2>&1 || { echo "the two-host run failed:"; cat two.log; exit 1; }
grep -q "data parallel: 2 processes" two.log || { echo "the run was not data parallel:"; cat two.log; exit 1; }
for f in model.safetensors optimizer.safetensors; do
    cmp one/$f two/$f || { echo "two hosts and one process differ in $f"; exit 1; }
done
echo "two hosts (namespaces $A, $B over ${NET}0/24): bit-identical to one process"
