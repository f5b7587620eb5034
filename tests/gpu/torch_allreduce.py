#!/usr/bin/env python3
"""torch.distributed all-reduce through whatever NCCL net is configured, checked exactly.

Run by scripts/check-nccl-plugin.sh with NCCL_NET_PLUGIN=<abs path>/libnccl-net-megascale.so
NCCL_NET=MegaScale (and P2P/SHM off on one host). Starts WORLD_SIZE processes (default: the number of
GPUs, at least 2); with fewer GPUs than ranks, ranks share GPUs and get distinct NCCL_HOSTID values so
that NCCL treats them as separate hosts. Each rank all-reduces tensors filled with rank + 1 (fp32 and
bf16, odd sizes up to 64 Mi elements) and checks every element equals n(n+1)/2, exact in both types for
up to 21 ranks. Exit status 0 when every rank saw the right sums.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [1, 1023, (1 << 20) + 1, (16 << 20) + 3, 64 << 20]


def worker(rank: int, world: int, ngpus: int, port: int) -> None:
    if ngpus < world:
        os.environ["NCCL_HOSTID"] = f"megascale-torch-rank{rank}"
    torch.cuda.set_device(rank % ngpus)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    expected = world * (world + 1) // 2
    for dtype in (torch.float32, torch.bfloat16):
        for n in SIZES:
            t = torch.full((n,), float(rank + 1), dtype=dtype, device="cuda")
            dist.all_reduce(t)
            wrong = int((t != expected).sum().item())
            if wrong:
                raise SystemExit(f"rank {rank}: all_reduce of {n} x {dtype}: {wrong} elements != {expected}")
            if rank == 0:
                print(f"all_reduce {n:>10} x {str(dtype):<15} ok (every element {expected})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ngpus = torch.cuda.device_count()
    if ngpus < 1:
        print("torch_allreduce: no GPU", file=sys.stderr)
        return 2
    world = int(os.environ.get("WORLD_SIZE", max(2, ngpus)))
    if world > 21:
        print("torch_allreduce: at most 21 ranks (larger sums are not exact in bf16)", file=sys.stderr)
        return 2
    mp.spawn(worker, args=(world, ngpus, free_port()), nprocs=world, join=True)
    print(f"torch_allreduce: {world} ranks on {ngpus} GPU(s): ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
