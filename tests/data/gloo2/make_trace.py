import os, sys, torch, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity, record_function, schedule
def main():
    rank=int(os.environ['RANK']); ws=int(os.environ['WORLD_SIZE'])
    dist.init_process_group('gloo')
    g2 = dist.new_group([0,1])
    x=torch.randn(64,64); big=torch.randn(ws*1024)
    out=torch.empty(1024)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for s in range(3):
            y = x@x
            with record_function("commscope:grad:reduce"):
                w=dist.reduce_scatter_tensor(out, big, async_op=True)
            with record_function("commscope:w:allreduce"):
                w2=dist.all_reduce(y, async_op=True, group=g2)
            z=x@x@x
            w.wait(); w2.wait()
            ag=torch.empty(ws*1024); dist.all_gather_into_tensor(ag, out)
            prof.step()
    prof.export_chrome_trace(f"{sys.argv[1]}/rank{rank}.json")
    dist.destroy_process_group()
main()
