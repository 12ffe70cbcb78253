"""A DistributedDataParallel communication hook that keeps resumed runs bit-exact.

DDP sums gradients bucket by bucket, and it lays its buckets out anew after the first step of every process
(by the order gradients became ready). Where an element sits in a bucket decides the order in which the ranks'
values are added, and with three or more ranks floating-point addition is not associative: a resumed process,
whose first step uses the initial layout, ends a few bits away from a run that was never interrupted. This hook
reduces each gradient tensor on its own, so every element is summed the same way whatever the layout:

    model = DistributedDataParallel(module)
    model.register_comm_hook(None, spotrun.exact_allreduce)

It costs one collective per parameter tensor instead of one per bucket (noticeable only for models with very many
small tensors).
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations as real objects.
import torch
import torch.distributed as dist


def exact_allreduce(process_group: dist.ProcessGroup, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The mean of every gradient over the ranks, one all_reduce per gradient tensor, in the bucket's buffer."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    works = []
    offset = 0
    for gradient in bucket.gradients():
        part = buffer[offset : offset + gradient.numel()]
        works.append(dist.all_reduce(part, group=group, async_op=True))
        offset += gradient.numel()
    for work in works:
        work.wait()
    buffer.div_(dist.get_world_size(group))
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(buffer)
    return done
