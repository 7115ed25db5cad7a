# shellcheck shell=sh
# Sourced by the mpirun tests: set up OpenMPI for a root run in a container and
# find mpirun options that start two local processes here. Sets $mpi (the
# command, with a kill timeout) and $opts (extra options); exits 77 (skip)
# when nothing works. Needs $tmp, a scratch folder.
# Root in a container: OpenMPI wants both the flag and the variables. The
# ranks never call MPI_Init, so only process launch matters: where mpirun has
# no working rsh/ssh agent, the 'isolated' launcher starts local processes.
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
# variables of an outer launcher would be read first
unset RK_RANK RK_WORLD_SIZE RK_LEADER RK_PORT SLURM_PROCID SLURM_NTASKS RANK WORLD_SIZE \
	MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID LWS_LEADER_ADDRESS LWS_GROUP_SIZE \
	LWS_WORKER_INDEX 2>/dev/null

mpi="timeout -s KILL 120 mpirun --allow-run-as-root --oversubscribe -np 2"
mca=
for opts in "" "--mca plm isolated" "--mca plm isolated --mca btl self,tcp"; do
	# shellcheck disable=SC2086
	if $mpi $opts sh -c 'echo "r$OMPI_COMM_WORLD_RANK/$OMPI_COMM_WORLD_SIZE"' \
		>"$tmp/probe.out" 2>"$tmp/probe.err" </dev/null &&
	   [ "$(sort "$tmp/probe.out")" = "$(printf 'r0/2\nr1/2')" ]; then
		mca=ok
		break
	fi
done
if [ -z "$mca" ]; then
	echo "SKIP: mpirun cannot start two local processes here:"
	cat "$tmp/probe.err"
	exit 77
fi
echo "mpirun options: ${opts:-(none)}"
