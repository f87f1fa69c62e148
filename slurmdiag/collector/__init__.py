"""slurmdiag node collector: one framed JSON document about a Slurm job's processes on a node.

Stdlib only, Python 3.8+, never imports slurmdiag: each module imports only its siblings and the
standard library. The controller ships the package as ONE payload (slurmdiag/transport/
collect.py bundles the modules __main__ needs) and runs loader.py with ``python3 -I -S -c`` in
one ``srun --overlap`` step (or over ssh), one task per node. Every node pays its start-up, and
on an emulated cluster all nodes share one host, so the normal path imports only C modules: not
json, subprocess, threading or signal (each pulls in re, enum, locale or more, ~5-10 ms per
node). One thread runs everything (see tools.py).

The modules, in the order of a collection:
    options     the arguments the controller sends (every option, no defaults here)
    main        collect() phase by phase, main(): watchdog and signals, the document out
    tools       running tools: one-thread event loop, tasks, the Clock
    procfs      /proc readers, secret masking
    discovery   the job's processes below its slurmstepd, their roles
    stacks      py-spy samples, mp.spawn identities, per-thread usage
    strace      strace -c windows
    gpus        nvidia-smi and Xid lines
    nics        interfaces and InfiniBand ports
    sockets     TCP sockets (sock_diag), connections
    fdsockets   sockets read through copies of the processes' own descriptors (pidfd_getfd)
    netlink     the netlink message walk nics and sockets share
    filelocks   the file locks ranks hold and wait for (/proc/locks)
    syscalls    the system call each thread sits in and what its descriptor is
    flight      PyTorch Flight Recorder requests and dumps
    framing     JSON without the json package, framed stdout lines
    __main__    the program the loader runs
    loader      the node command's -c program: the interpreter check, the node cache's lookup
    bundle      sent with the modules: compiles them, keeps them in the node cache, installs them
    doctor_node ``slurmdiag doctor``'s node program (a single file, shipped the same way)
"""
