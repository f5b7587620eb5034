#!/usr/bin/env python3
"""Where the host's CPU went during a run, by kind of work: for check-nccl-plugin.sh's PROFILE=1.

    scripts/profile-table.py --hz HZ LABEL=REPORT:SECONDS [LABEL=REPORT:SECONDS ...]

REPORT is the text of `perf report -n -t '|' --stdio --no-children --sort comm,dso,sym` over a
`perf record -a -e cpu-clock -F HZ` of SECONDS seconds (every CPU of the host: both ranks, MPS, the
kernel's network work). Each sample line is put in the first category it matches:
  - payload CRC32C          the engine's CRC32C (crc32c*, the avx512/sse42 kernels)
  - kernel: copies          copy_to/from_iter, copy_user and the kernel's memcpy/memmove
  - kernel: network stack   UDP, IP, TCP, sockets, skbs, loopback, the send/recv system calls
  - kernel: scheduling, syscalls, locks   schedule, yield, futex, epoll, syscall entry, spinlocks, IRQs
  - kernel: other
  - user memcpy             memcpy/memmove resolved in user space
  - libc, unresolved        addresses in a stripped libc (memcpy/memmove among them)
  - libc, other             the rest of libc (system call stubs, sched_yield)
  - MegaScale engine        megascale::engine:: (protocol work)
  - MegaScale wire and plugin   megascale::wire::, megascale::nccl::, the plugin library
  - NCCL                    libnccl
  - CUDA                    libcuda, libcudart
  - nccl_check (inputs and checks)   the test program's own work (filling inputs, checking results)
  - other user space
Idle (the swapper threads, the idle loop) is left out. Prints a markdown table of host cores per
category (samples / (HZ x SECONDS)), one column per LABEL. Exit status 2 on a bad argument or a REPORT
without sample lines, with a message naming it.
"""
import re
import sys

KERNEL_COPY = re.compile(r"copy_(to|from)_(iter|user)|_copy_|copy_user|memcpy|memmove|rep_movs|copy_page")
KERNEL_NET = re.compile(r"udp|(^|_)ip_|ipv4|ipv6|tcp|skb|sock|net_|netif|napi|loopback|dev_queue|dev_hard|"
                        r"sendmsg|recvmsg|sendmmsg|recvmmsg|__sys_send|__sys_recv|inet|nf_|neigh|gso|gro|"
                        r"csum|dst_|fib_|raw_local_deliver|sk_")
KERNEL_SCHED = re.compile(r"sched|schedule|switch_|yield|futex|syscall|entry_|irq|spin_|epoll|ep_|wake|"
                          r"hrtimer|tick|fdget|fput|rcu|ktime|clock|do_syscall|exit_to_user")
IDLE = re.compile(r"idle|halt|mwait|poll_idle|cpu_startup_entry")
CRC = re.compile(r"crc32c|::(avx512|sse42)_register")
CATEGORIES = ("payload CRC32C", "kernel: copies", "kernel: network stack",
              "kernel: scheduling, syscalls, locks", "kernel: other", "user memcpy", "libc, unresolved",
              "libc, other", "MegaScale engine", "MegaScale wire and plugin", "NCCL", "CUDA",
              "nccl_check (inputs and checks)", "other user space")


class Usage(Exception):
    pass


def category(comm, dso, sym):
    """The category of one sample line, or None for idle."""
    kernel = sym.startswith("[k]")
    name = sym[3:].strip() if sym[:1] == "[" else sym.strip()
    if comm.startswith("swapper") or (kernel and IDLE.search(name)):
        return None
    if CRC.search(name):
        return "payload CRC32C"
    if kernel:
        if KERNEL_COPY.search(name):
            return "kernel: copies"
        if KERNEL_NET.search(name):
            return "kernel: network stack"
        if KERNEL_SCHED.search(name):
            return "kernel: scheduling, syscalls, locks"
        return "kernel: other"
    if re.search(r"memcpy|memmove", name):
        return "user memcpy"
    if re.match(r"libc[.-]", dso):
        return "libc, unresolved" if re.fullmatch(r"0x[0-9a-f]+", name) else "libc, other"
    if name.startswith("megascale::engine::"):
        return "MegaScale engine"
    if name.startswith("megascale::gpucheck::") or dso == "nccl_check":
        return "nccl_check (inputs and checks)"
    if re.match(r"megascale::(wire|nccl)::", name) or "megascale" in dso:
        return "MegaScale wire and plugin"
    if "libnccl" in dso:
        return "NCCL"
    if "libcuda" in dso:
        return "CUDA"
    return "other user space"


def parse(path):
    """{category: samples} from a perf report written with -n -t '|'."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Usage(f"{path}: {e.strerror}") from None
    samples = dict.fromkeys(CATEGORIES, 0)
    seen = 0
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[0].strip().endswith("%") or not parts[1].strip().isdigit():
            continue
        seen += 1
        c = category(parts[2].strip(), parts[3].strip(), parts[4])
        if c is not None:
            samples[c] += int(parts[1])
    if seen == 0:
        raise Usage(f"{path}: no sample lines (want `perf report -n -t '|' --sort comm,dso,sym`)")
    return samples


def main(argv):
    if len(argv) < 3 or argv[0] != "--hz" or not argv[1].isdigit() or int(argv[1]) < 1:
        raise Usage("usage: profile-table.py --hz HZ LABEL=REPORT:SECONDS ...")
    hz = int(argv[1])
    columns = []
    for arg in argv[2:]:
        label, sep, rest = arg.partition("=")
        path, sep2, seconds = rest.rpartition(":")
        try:
            secs = float(seconds)
        except ValueError:
            secs = 0.0
        if not sep or not sep2 or not label or not path or secs <= 0:
            raise Usage(f"'{arg}' is not LABEL=REPORT:SECONDS with SECONDS > 0")
        columns.append((label, {c: n / (hz * secs) for c, n in parse(path).items()}))
    out = ["| host cores | " + " | ".join(label for label, _ in columns) + " |",
           "|---|" + "---:|" * len(columns)]
    for c in CATEGORIES:
        if all(col[c] < 0.005 for _, col in columns):
            continue
        out.append(f"| {c} | " + " | ".join(f"{col[c]:.2f}" for _, col in columns) + " |")
    out.append("| **all but idle** | " + " | ".join(f"**{sum(col.values()):.2f}**" for _, col in columns) +
               " |")
    print("\n".join(out))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Usage as e:
        print(f"profile-table.py: {e}", file=sys.stderr)
        sys.exit(2)
