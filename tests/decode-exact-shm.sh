#!/bin/sh
# decode-exact.sh with every link required on shared memory (RK_SHM=on): the
# ranks of one host move their links after the handshake and the leader
# writes each ROUND once into the broadcast ring; a link that cannot move
# fails the job (RK_ENOSHM), so a pass means the token hashes (TP1 == TP2 ==
# TP4 == the reference) held over shm links. Twice: with RK_RESIDENT=on (the
# CPU followers' workers take each round from the leader's shared epoch
# region, docs/RESIDENT-SHM.md) and with RK_RESIDENT=off (the launch path
# only). Run from the build directory.
RK_SHM=on
export RK_SHM
for res in on off; do
	echo "== RK_RESIDENT=$res"
	RK_RESIDENT=$res sh "$(dirname "$0")/decode-exact.sh" "$@" || exit $?
done
exit 0
