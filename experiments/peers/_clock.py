"""When this process was created, in epoch seconds, to the kernel's clock tick: the start every
time-to-threshold counts from (ours, `jaxrl_fast.outputs.metrics.process_start_time`, computes it
the same way). psutil's `create_time` adds its start tick to /proc/stat's `btime`, a whole second,
so its start is early by up to a second, the same on every process of one boot; the age of the
process on the boot-time clock has no such rounding."""
import os
import time


def process_start_time():
    with open(f"/proc/{os.getpid()}/stat") as stat:
        ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks since boot
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age
