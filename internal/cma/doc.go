// Package cma reads another process's memory with the kernel's
// cross-memory attach (process_vm_readv, Linux 3.2 on): one copy, from
// the other process's pages into this one's, with no memory shared.
// comm.Register uses it so that the ranks of one host read the buffers
// their peers registered.
//
// The kernel allows it as it allows ptrace's attach (PTRACE_MODE_ATTACH):
// the same user, a target that is dumpable (prctl PR_SET_DUMPABLE), or
// CAP_SYS_PTRACE over the target's user namespace; and where the Yama
// module is in force, its ptrace_scope too: 1 allows only a process the
// target names (prctl PR_SET_PTRACER), 2 only CAP_SYS_PTRACE, 3 none.
// What it refuses comes back as an error wrapping the errno (EPERM,
// ESRCH, ENOSYS where the call is compiled out, EFAULT for an address
// the target has not mapped).
package cma
