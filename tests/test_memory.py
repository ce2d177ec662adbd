"""Per-stage memory: the sampler sees a stage's own peak, even one freed before the stage ends."""

import sys
import time

import pytest
import torch

from turncredit.memory import StagePeak, release_freed, rss_gb

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


@linux_only
def test_stage_peak_sees_memory_freed_before_the_stage_ends():
    release_freed()  # what earlier tests freed is not resident before the stage either
    before = rss_gb()
    with StagePeak(interval=0.01) as mem:
        big = torch.ones(400 * 2**20 // 4)  # 400 MiB, touched
        time.sleep(0.1)
        del big
    assert mem.peak_gb - before > 0.3, (before, mem.peak_gb)
    assert mem.after_gb < mem.peak_gb - 0.3  # freed and handed back: not resident after the stage
