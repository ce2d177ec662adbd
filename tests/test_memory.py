"""Per-stage memory: the sampler sees a stage's own peak, even one freed before the stage ends."""

import os
import sys
import time

import pytest
import torch

from turncredit.memory import ONEDNN_PRIMITIVE_CACHE, StagePeak, cap_onednn_primitive_cache, release_freed, rss_gb

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


@pytest.mark.parametrize("user", [None, "ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"])
def test_onednn_cache_capped_unless_the_user_chose(monkeypatch, user):
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    if user:
        monkeypatch.setenv(user, "1024")
    cap_onednn_primitive_cache()
    want = str(ONEDNN_PRIMITIVE_CACHE) if user is None else ("1024" if user.startswith("ONEDNN") else None)
    assert os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == want
