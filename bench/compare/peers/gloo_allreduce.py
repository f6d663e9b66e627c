"""The gloo side of bench/compare: torch.distributed's all_reduce with the
gloo backend on CPU, float32 sum, over a size sweep doubling from MIN to MAX
bytes, one process per rank started here (no torchrun needed), meeting over
TCP on 127.0.0.1. It prints nccl-tests' columns, as collbench does:

    size count time_us algbw busbw wrong

time_us is the slowest rank's mean per call; busbw is algbw*2(n-1)/n. Each
size runs three untimed calls, then as many timed ones as collbench would,
then one call whose result every rank checks.

Usage: python3 gloo_allreduce.py NRANKS MIN MAX
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iters_for(nbytes):
    if nbytes < 1 << 20:
        return 200
    if nbytes < 16 << 20:
        return 20
    return 5


def rank_main(rank, n, port, lo, hi):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    if rank == 0:
        print("# size count time_us algbw busbw wrong", flush=True)
    size = max(lo, 4)
    while size <= hi:
        count = size // 4
        pattern = (torch.arange(count) % 7).float()
        buf = pattern + (rank + 1)
        for _ in range(3):
            dist.all_reduce(buf)
        iters = iters_for(size)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        mine = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        buf = pattern + (rank + 1)
        dist.all_reduce(buf)
        want = pattern * n + n * (n + 1) / 2
        wrong = torch.tensor([int((buf != want).sum())], dtype=torch.int64)
        dist.all_reduce(wrong)
        if rank == 0:
            t = mine.item()
            algbw = size / t / 1e9
            print(f"{size} {count} {t * 1e6:.2f} {algbw:.3f} {algbw * 2 * (n - 1) / n:.3f} {wrong.item()}", flush=True)
        size *= 2
    dist.destroy_process_group()


def main():
    n, lo, hi = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    mp.spawn(rank_main, args=(n, port, lo, hi), nprocs=n, join=True)


if __name__ == "__main__":
    main()
