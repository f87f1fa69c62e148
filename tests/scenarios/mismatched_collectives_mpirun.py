"""Scenario: `mismatched_collectives` launched by Open MPI's mpirun from the batch script.

mpirun starts one orted a node through srun, and each orted its node's ranks, giving each its
place in OpenMPI's variables (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK): the way of MPI-minded
sites and of DeepSpeed's openmpi launcher. torch reads RANK and WORLD_SIZE, so the program sets
them from OpenMPI's before anything else, as such scripts do: they are in ``os.environ``, not
in the process' environment. Every rank's SLURM_PROCID is its orted's, the node's index.
Culprit: rank 1, as in `mismatched_collectives`.
"""

from __future__ import annotations

import os

for torch_name, mpi_name in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                             ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")):
    os.environ[torch_name] = os.environ[mpi_name]

import mismatched_collectives  # after the variables torch reads

if __name__ == "__main__":
    mismatched_collectives.main()
