"""gloo side of bench/compare: torch.distributed.all_reduce on a float32 CPU
tensor with SUM, gloo backend, over a sweep of sizes. One process per rank;
compare starts them all and reads rank 0's output.

usage: gloo_allreduce.py RANK SIZE STOREFILE MINBYTES MAXBYTES ITERS

The ranks meet through a torch FileStore at STOREFILE (no port to pick), or,
with STOREFILE env://, through a TCPStore at MASTER_ADDR:MASTER_PORT served by
rank 0, as torchrun's ranks do (compare -hosts); gloo then connects its pairs
over TCP on GLOO_SOCKET_IFNAME (compare sets lo, or eth0 across hosts).
Rank 0 prints one line per size: bytes, elements, the slowest rank's mean time
per call in microseconds, wrong elements summed over ranks. As in a training
script, each timed call is a plain synchronous all_reduce from Python.

all_reduce works in place: each size is checked once on patterned data, then
timed on zeros, whose sum stays zero however often it is repeated.
"""
import sys
import time

import torch
import torch.distributed as dist


def iterations(nbytes, fixed):
    if fixed > 0:
        return fixed
    if nbytes < 1 << 20:
        return 200
    return 20 if nbytes < 16 << 20 else 5


def main(argv):
    if len(argv) != 6:
        print(__doc__.splitlines()[4].strip(), file=sys.stderr)
        return 2
    rank, size = int(argv[0]), int(argv[1])
    lo, hi, fixed = int(argv[3]), int(argv[4]), int(argv[5])
    if argv[2] == "env://":
        import os
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size, rank == 0)
    else:
        store = dist.FileStore(argv[2], size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
    pattern = (torch.arange(hi // 4) % 7 + 1).to(torch.float32)
    buf = torch.zeros(hi // 4, dtype=torch.float32)
    for _ in range(100):
        dist.all_reduce(buf[: lo // 4])
    b = lo
    while b <= hi:
        n = b // 4
        t = buf[:n]
        torch.mul(pattern[:n], rank + 1, out=t)
        dist.all_reduce(t)
        wrong = torch.tensor([int((t != pattern[:n] * (size * (size + 1) // 2)).sum())])
        t.zero_()
        for _ in range(3):
            dist.all_reduce(t)
        iters = iterations(b, fixed)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        mean = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        if rank == 0:
            print("%d %d %.3f %d" % (b, n, mean.item() * 1e6, wrong.item()), flush=True)
        b *= 2
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
