// Every thread's stack, for a hang report: nccl_check prints them when a wait outlasts --timeout, so
// that a run stuck in a net plugin, in NCCL or in the CUDA driver says where each thread was (a
// deadlock between threads shows as each one's wait).
//
//   megascale::gpucheck::write_thread_stacks(STDERR_FILENO);
//
// Each thread writes its own backtrace (glibc's backtrace(), from a signal handler the call installs and
// then restores), one after another, under a line naming it:
//
//   --- thread 4242 "NCCL Progress 0"
//   /path/libnccl-net-megascale.so(+0x5a3f0)[0x7f...]
//
// Frames in a library without exported symbols show as offsets: `addr2line -f -C -e LIB 0x5a3f0` on the
// same build names them. A thread that does not answer within 200 ms (the signal is held until it
// returns from an uninterruptible wait) is named as such. Not async-signal-safe itself: call it from an
// ordinary thread.
#pragma once

namespace megascale::gpucheck {

// Writes every thread's stack to `fd`; returns how many threads wrote one (the caller's included).
int write_thread_stacks(int fd);

}  // namespace megascale::gpucheck
